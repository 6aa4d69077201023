package inspect

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
)

// The log reader skips over-long lines without failing, and reads on
// after end of file when the log grows.
func TestLogReader(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	big := strings.Repeat("y", abi.MaxLineBytes+10)
	if err := os.WriteFile(p, []byte("{\"a\":1}\n\n"+big+"\n{\"b\":2}"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lr := newLogReader(f)
	var got []string
	for {
		line, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(line))
	}
	if strings.Join(got, " ") != `{"a":1} {"b":2}` || lr.takeBad() != 1 {
		t.Fatalf("lines %q", got)
	}
	w, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.WriteString("\n{\"c\":3}\n")
	w.Close()
	if line, err := lr.next(); err != nil || string(line) != `{"c":3}` {
		t.Fatalf("after growth: %q %v", line, err)
	}
}

// runs reads a message line through proto.Message: the text rule of every
// reader (text parts joined as they are), the "uid" of a line appended
// through the mount ignored, and a line malformed only when it is not an
// object or the content of a message whose text is read has no text shape.
func TestRunsMessages(t *testing.T) {
	l := newRunLog("HelloT") // across two text parts: found only when they join as they are
	for _, ev := range []string{`{"type":"start","run":"A","ts":"T"}`, `{"type":"start","run":"B","ts":"T"}`} {
		if !l.event([]byte(ev)) {
			t.Fatalf("event %s", ev)
		}
	}
	lines := []struct {
		line string
		ok   bool
	}{
		{`{"role":"user","run":"A","content":"hello\nsecond line","uid":1001}`, true},
		{`{"role":"assistant","run":"A","content":[{"type":"text","text":"hel"},{"type":"tool_call","id":"c"},{"type":"text","text":"lotwo"}]}`, true},
		{`{"role":"tool","run":"A","content":{"not":"parts"}}`, true}, // text not read
		{`{"role":"user","run":"B","content":{"not":"parts"}}`, false},
		{`[1]`, false},
	}
	for _, c := range lines {
		if got := l.message([]byte(c.line)); got != c.ok {
			t.Errorf("%s: %v, want %v", c.line, got, c.ok)
		}
	}
	a := l.byID["A"]
	if a.Input != "hello" || !a.matched {
		t.Fatalf("run A: input %q matched %v", a.Input, a.matched)
	}
}
