package chat

import (
	"io"
	"strings"
	"testing"

	"golang.org/x/term"
)

// Ctrl+C drops a half-typed line; at an empty line it ends the input.
func TestKeyReaderCtrlC(t *testing.T) {
	k := &keyReader{r: strings.NewReader("abc\x03hi\r\x03more\r")}
	tm := term.NewTerminal(struct {
		io.Reader
		io.Writer
	}{k, io.Discard}, "> ")
	tm.AutoCompleteCallback = k.callback
	if line, err := tm.ReadLine(); line != "hi" || err != nil {
		t.Fatalf("first line %q, %v; want hi", line, err)
	}
	if line, err := tm.ReadLine(); line != "" || err != io.EOF {
		t.Fatalf("after Ctrl+C at an empty line: %q, %v; want EOF", line, err)
	}
}
