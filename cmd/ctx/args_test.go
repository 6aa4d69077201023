package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/internal/cli/clienv"
)

// parseLine parses argv as the flags and arguments of table entry c, as
// the CLI does.
func parseLine(c *command, argv []string) (*clienv.Parsed, error) {
	cc := leafCommand(&clienv.Env{Getenv: func(string) string { return "" }}, c)
	if err := cc.ParseFlags(argv); err != nil {
		return nil, err
	}
	return parsedFrom(cc.Flags(), c.flags, cc.Flags().Args()), nil
}

func findEntry(t *testing.T, name string) *command {
	t.Helper()
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	t.Fatalf("no command %q", name)
	return nil
}

func TestParseArgsAnyOrder(t *testing.T) {
	send := findEntry(t, "send")
	for _, c := range []struct {
		argv    []string
		args    []string
		session string
		json    bool
	}{
		{[]string{"coder", "hello", "--session", "x"}, []string{"coder", "hello"}, "x", false},
		{[]string{"--session", "x", "coder", "hello"}, []string{"coder", "hello"}, "x", false},
		{[]string{"--session=x", "coder", "--json", "hello"}, []string{"coder", "hello"}, "x", true},
		{[]string{"--session", "x", "coder", "-"}, []string{"coder", "-"}, "x", false},
		{[]string{"coder", "--", "--session", "-v"}, []string{"coder", "--session", "-v"}, "", false},
		{[]string{"--json=false", "coder", "hi"}, []string{"coder", "hi"}, "", false},
		{[]string{"--session", "a", "coder", "--session", "b", "hi"}, []string{"coder", "hi"}, "b", false},
	} {
		p, err := parseLine(send, c.argv)
		if err != nil {
			t.Fatalf("%q: %v", c.argv, err)
		}
		if !reflect.DeepEqual(p.Args, c.args) || p.Str("session") != c.session || p.On("json") != c.json {
			t.Errorf("%q: args %q session %q json %v", c.argv, p.Args, p.Str("session"), p.On("json"))
		}
	}
}

// A flag that was not given is absent, so that `--cwd ""` (sent, and
// refused by the server) differs from no --cwd.
func TestParseArgsGiven(t *testing.T) {
	send := findEntry(t, "send")
	p, _ := parseLine(send, []string{"coder", "hi"})
	if _, ok := p.Vals["cwd"]; ok {
		t.Errorf("cwd present without --cwd: %q", p.Vals)
	}
	p, _ = parseLine(send, []string{"coder", "--cwd=", "hi"})
	if v, ok := p.Vals["cwd"]; !ok || v != "" {
		t.Errorf("--cwd= : %q %v", v, ok)
	}
}

func TestParseArgsRepeated(t *testing.T) {
	gc := findEntry(t, "session gc")
	p, err := parseLine(gc, []string{"coder", "--pattern", "a-*", "--keep=k1", "--pattern=b-*", "--keep", "k2", "--yes"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.All("pattern"), []string{"a-*", "b-*"}) || !reflect.DeepEqual(p.All("keep"), []string{"k1", "k2"}) || !p.On("yes") {
		t.Errorf("pattern %q keep %q yes %v", p.All("pattern"), p.All("keep"), p.On("yes"))
	}
	hist := findEntry(t, "history")
	for _, argv := range [][]string{{"coder", "-n", "3"}, {"-n3", "coder"}, {"coder", "--last=3"}} {
		if p, err := parseLine(hist, argv); err != nil || p.Str("last") != "3" {
			t.Errorf("%q: %v %v", argv, p, err)
		}
	}
}

func TestParseArgsErrors(t *testing.T) {
	send := findEntry(t, "send")
	for _, argv := range [][]string{
		{"coder", "--session"},       // missing value
		{"coder", "-v", "hi"},        // unknown flag
		{"--json=maybe", "c", "hi"},  // bool with a bad value
		{"-session", "x", "c", "hi"}, // single-dash long flags are shorthands, and unknown
	} {
		if _, err := parseLine(send, argv); err == nil {
			t.Errorf("%q: no error", argv)
		}
	}
}

// Every table entry becomes a command at its path, with its aliases, and
// the paths are unique.
func TestCommandTree(t *testing.T) {
	root := newCLI(&clienv.Env{Getenv: func(string) string { return "" }})
	seen := map[string]bool{}
	for _, c := range commands {
		if seen[c.path()] {
			t.Errorf("two entries at %q", c.path())
		}
		seen[c.path()] = true
		for _, name := range append([]string{c.leaf()}, c.aliases...) {
			words := strings.Fields(c.path())
			words[len(words)-1] = name
			got, rest, err := root.Find(words)
			if err != nil || len(rest) != 0 || got.Name() != c.leaf() {
				t.Errorf("%q: found %v %q %v", words, got.Name(), rest, err)
			}
		}
	}
}

func TestFlagSynopsis(t *testing.T) {
	got := findEntry(t, "session gc").synopsis()
	want := "ctx agent session gc AGENT [--shared SPACE] [--pattern GLOB]... [--older-than-days N] [--keep NAME]... [--yes] [--delete] [--archive-dir ABS] [--json]"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got := findEntry(t, "history").synopsis(); !strings.Contains(got, "[-n N]") {
		t.Errorf("history: %s", got)
	}
}

// The commands added after the table moved onto cobra are plain entries:
// a top-level one (ctx doctor), one under agent beside session list (ctx
// agent list), one with an alias and an optional argument (ctx agent
// attach|resume AGENT [RUN]).
func TestTableEntriesAddable(t *testing.T) {
	out, _, _ := ctxRun("", "", "--help")
	for _, s := range []string{"  ctx doctor [--json]\n", "  ctx agent list [--json]\n", "  ctx agent attach AGENT [RUN] [--session S] ", "  doctor "} {
		if !strings.Contains(out, s) {
			t.Errorf("ctx --help lacks %q:\n%s", s, out)
		}
	}
	if _, errs, code := ctxRun("", "", "agent", "attach"); code != 2 || !strings.HasPrefix(errs, "ctx: attach: missing AGENT; ") {
		t.Errorf("attach without AGENT: code %d errs %q", code, errs)
	}
}
