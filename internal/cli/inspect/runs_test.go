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
