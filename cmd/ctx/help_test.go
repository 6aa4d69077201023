package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/internal/mangen"
)

// Every entry of the table, and every one added later, has a short line,
// a description, an example, and a help that lists each of its flags
// with a description; --help exits 0 and writes nothing on stderr.
func TestHelpEveryCommand(t *testing.T) {
	for _, c := range commands {
		out, errs, code := ctxRun(t.TempDir(), "", append(strings.Fields(c.path()), "--help")...)
		if code != 0 || errs != "" {
			t.Errorf("%s --help: code %d errs %q", c.path(), code, errs)
		}
		if c.shortHelp() == "" || c.help == "" || c.examples == "" || !strings.Contains(out, "\nExamples:\n  ctx ") {
			t.Errorf("%s: needs short, help and examples:\n%s", c.path(), out)
		}
		for _, f := range c.flags {
			if f.usage == "" || !strings.Contains(out, "--"+f.name) {
				t.Errorf("%s: flag --%s has no description in:\n%s", c.path(), f.name, out)
			}
		}
	}
}

// The man pages are made from the same tree (what make man's gen-man
// does): one per command, with its synopsis, flags and examples; the
// hidden generator has none.
func TestManPages(t *testing.T) {
	dir := t.TempDir()
	root := newCLI(&clienv.Env{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }})
	gen := mangen.Command(root, "ctx test")
	root.AddCommand(gen)
	if err := gen.RunE(gen, []string{dir}); err != nil {
		t.Fatal(err)
	}
	for _, c := range commands {
		page := filepath.Join(dir, "ctx-"+strings.ReplaceAll(c.path(), " ", "-")+".1")
		b, err := os.ReadFile(page)
		if err != nil {
			t.Errorf("%s: %v", c.path(), err)
			continue
		}
		for _, want := range []string{".TH \"CTX", "ctx " + c.path(), ".SH EXAMPLE"} {
			if !strings.Contains(string(b), want) {
				t.Errorf("%s lacks %q", page, want)
			}
		}
		for _, f := range c.flags {
			if !strings.Contains(string(b), `\fB--`+f.name+`\fP`) {
				t.Errorf("%s lacks --%s", page, f.name)
			}
		}
	}
	for _, name := range []string{"ctx.1", "ctx-agent.1", "ctx-agent-session.1", "ctx-completion-bash.1"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*"+mangen.Name+"*")); len(m) != 0 {
		t.Errorf("the generator has a page: %q", m)
	}
}

// There is no `ctx latest` (SPEC 11: `ctx agent output` prints latest.md),
// nor `ctx agent latest`: an unknown command, exit 2.
func TestNoLatest(t *testing.T) {
	for _, args := range [][]string{{"latest"}, {"agent", "latest", "coder"}} {
		out, errs, code := ctxRun(t.TempDir(), "", args...)
		if code != 2 || out != "" || !strings.HasPrefix(errs, "ctx: unknown command") {
			t.Errorf("ctx %v: code %d out %q errs %q", args, code, out, errs)
		}
	}
}
