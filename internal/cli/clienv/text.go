package clienv

import (
	"io"
	"os"
	"strings"
	"unicode"

	"golang.org/x/term"

	"github.com/ctxfs/ctxfs/abi"
)

// FirstLine is the first line of s, cut to at most max bytes on a
// character boundary ("…" marks the cut).
func FirstLine(s string, max int) string {
	s, _, _ = strings.Cut(s, "\n")
	s = strings.TrimSuffix(s, "\r")
	return abi.Clip(s, max)
}

// Printable makes text from a log safe for a terminal and for a
// tab-separated line: control characters (escape sequences, tabs) become
// spaces, since log text is written by programs and by users.
func Printable(s string) string {
	if strings.IndexFunc(s, unicode.IsControl) < 0 {
		return s
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

// IsTerminal reports whether w is a terminal: only there do commands add
// what only a person reads (the run id, tool lines, progress).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
