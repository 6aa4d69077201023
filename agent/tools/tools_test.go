package tools

import (
	"bufio"
	"encoding/json"
	"io"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

func TestSpecs(t *testing.T) {
	got := Specs([]string{ShellExec, FSRemove, "bogus", FSRead})
	if len(got) != 2 || got[0].Name != ShellExec || got[1].Name != FSRead {
		t.Fatalf("Specs = %+v", got)
	}
	for _, s := range catalogue {
		var schema map[string]any
		if err := json.Unmarshal([]byte(s.params), &schema); err != nil || schema["type"] != "object" || schema["additionalProperties"] != false {
			t.Errorf("%s: schema %s: %v", s.name, s.params, err)
		}
		if s.description == "" {
			t.Errorf("%s has no description", s.name)
		}
	}
}

func TestAllowed(t *testing.T) {
	for _, c := range []struct {
		name, perm string
		want       bool
	}{
		{FSRead, "r", true}, {FSList, "r", true}, {FSStat, "rw", true}, {FSRead, "wx", false},
		{FSWrite, "r", false}, {FSWrite, "w", true}, {FSReplace, "rw", true},
		{ShellExec, "rw", false}, {ShellExec, "x", true},
		{AskUser, "", true}, {AskUser, "r", true},
		{"bogus", "rwx", false},
	} {
		if got := Allowed(c.name, c.perm); got != c.want {
			t.Errorf("Allowed(%s, %q) = %v", c.name, c.perm, got)
		}
	}
}

func TestParse(t *testing.T) {
	a, err := Parse(ShellExec, `{"command":"echo hi"}`)
	if err != nil || strings.Join(a.Argv, " ") != "/bin/sh -c echo hi" || a.Timeout != DefaultTimeout {
		t.Errorf("shell.exec command: %+v, %v", a, err)
	}
	a, err = Parse(FSReplace, `{"path":"p","old":"a","new":""}`)
	if err != nil || a.Count != 1 || len(a.New) != 0 {
		t.Errorf("fs.replace: %+v, %v", a, err)
	}
	a, err = Parse(FSRead, ` {"path":"p","offset":5,"limit":10} `)
	if err != nil || a.Offset != 5 || a.Limit != 10 {
		t.Errorf("fs.read: %+v, %v", a, err)
	}
	_, err = Parse(FSRead, `{"path":"p","limit":1.5}`)
	if abi.Errno(err) != syscall.EINVAL {
		t.Errorf("a fractional limit: %v", err)
	}
}

// FuzzParse: whatever a model sends, Parse returns arguments within their
// bounds or EINVAL, and never panics.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{`{"path":"a"}`, `{"argv":["a","b"],"timeout":3}`, `{"command":"x"}`, `{"path":"a","old":"b","new":"c","count":2}`,
		`{"path":"a","offset":1,"limit":2}`, `{"text":"q"}`, `{"path":"a","content":"c"}`, `null`, `[]`, `{"path":"a\u0000"}`, ``} {
		for _, s := range catalogue {
			f.Add(s.name, seed)
		}
	}
	f.Fuzz(func(t *testing.T, name, arguments string) {
		a, err := Parse(name, arguments)
		if err != nil {
			if abi.Errno(err) != syscall.EINVAL {
				t.Fatalf("Parse(%q, %q): %v, want EINVAL", name, arguments, err)
			}
			return
		}
		switch {
		case len(a.Path) > MaxPath || strings.IndexByte(a.Path, 0) >= 0:
			t.Fatalf("path %q passed", a.Path)
		case len(a.Content) > MaxBefore || a.Offset < 0 || a.Limit < 0 || a.Limit > MaxOutput:
			t.Fatalf("bounds passed: %+v", a)
		case name == ShellExec && (len(a.Argv) == 0 || a.Timeout < 1 || a.Timeout > MaxTimeout):
			t.Fatalf("shell.exec passed: %+v", a)
		}
	})
}

// A protocol line is bounded at MaxLine bytes, its newline not counted
// (EFBIG beyond); the end of the stream before a line begins is io.EOF,
// and a line cut off by it is an error of its own.
func TestReadRawLineBound(t *testing.T) {
	long := strings.Repeat("x", MaxLine)
	read := func(in string) ([]byte, error) { return readRawLine(bufio.NewReader(strings.NewReader(in))) }
	if got, err := read(long + "\n"); err != nil || len(got) != MaxLine+1 {
		t.Errorf("a line at the bound: %d bytes, %v", len(got), err)
	}
	_, err := read(long + "x\n")
	testkit.WantErrno(t, "a line one byte over", err, syscall.EFBIG)
	if _, err := read(""); err != io.EOF {
		t.Errorf("an empty stream: %v, want io.EOF", err)
	}
	if _, err := read(`{"id":1`); err == nil || err == io.EOF {
		t.Errorf("a line cut off: %v, want an error other than io.EOF", err)
	}
}
