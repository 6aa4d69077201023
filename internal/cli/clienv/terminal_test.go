package clienv

import (
	"bytes"
	"testing"
)

// TerminalText keeps text, newlines and tabs, and turns every other
// control character (C0, DEL, C1) and every byte that is no UTF-8 into
// U+FFFD; the writer does the same to a copy made in pieces without
// breaking a character cut between two writes.
func TestTerminalText(t *testing.T) {
	for in, want := range map[string]string{
		"plain é 中\n\tend":   "plain é 中\n\tend",
		"a\x1b[2Jb":          "a\uFFFD[2Jb",
		"\x1b]52;c;ZQ==\x07": "\uFFFD]52;c;ZQ==\uFFFD",
		"over\rwrite\x7f":    "over\uFFFDwrite\uFFFD",
		"c1 \u009b8m":        "c1 \uFFFD8m",
		"bad \xff byte":      "bad \uFFFD byte",
	} {
		if got := TerminalText(in); got != want {
			t.Errorf("TerminalText(%q) = %q, want %q", in, got, want)
		}
	}
	var b bytes.Buffer
	w := &terminalWriter{w: &b}
	in := []byte("é\x1b中")
	for i := range in { // one byte a write: every character cut
		w.Write(in[i : i+1])
	}
	if b.String() != "é\uFFFD中" {
		t.Errorf("written byte by byte: %q", b.String())
	}
}
