package clienv

import (
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// TerminalText is s as a terminal may be given it: every control
// character but newline and tab becomes U+FFFD (so does a byte that is no
// UTF-8). A model's or a program's text reaches a person's terminal
// through ctx: its ESC would start the sequences that move the cursor,
// clear or rewrite the screen (a forged approval prompt over the real
// one), hide text, set the window title or write the clipboard (OSC 52);
// CR writes a line over; the C1 controls (CSI, OSC as one character) do
// the same on terminals that take them.
func TerminalText(s string) string {
	if strings.IndexFunc(s, terminalControl) < 0 && utf8.ValidString(s) {
		return s
	}
	return strings.Map(func(r rune) rune {
		if terminalControl(r) {
			return utf8.RuneError
		}
		return r // an invalid byte ranges as utf8.RuneError already
	}, s)
}

func terminalControl(r rune) bool { return r != '\n' && r != '\t' && unicode.IsControl(r) }

// ForTerminal is w, through which text goes as TerminalText when w is a
// terminal; a pipe or a file gets the bytes as they are.
func ForTerminal(w io.Writer) io.Writer {
	if !IsTerminal(w) {
		return w
	}
	return &terminalWriter{w: w}
}

// terminalWriter writes TerminalText of what it is given, keeping the
// first bytes of a character cut at a write's end for the next write, so
// that a copy in chunks does not break characters into U+FFFD.
type terminalWriter struct {
	w    io.Writer
	tail []byte
}

func (t *terminalWriter) Write(p []byte) (int, error) {
	b := append(t.tail, p...)
	whole := len(b) - unfinishedRune(b)
	t.tail = append([]byte(nil), b[whole:]...)
	if _, err := io.WriteString(t.w, TerminalText(string(b[:whole]))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// unfinishedRune is how many of b's last bytes begin a character that
// b does not finish.
func unfinishedRune(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return len(b) - i
			}
			return 0
		}
	}
	return 0
}
