package abi

import (
	"bytes"
	"syscall"
	"unicode/utf8"

	"github.com/ctxfs/ctxfs/internal/jsonscan"
)

// CheckLogLine validates one log line without its trailing newline: valid
// UTF-8, at most MaxLineBytes, and exactly one JSON object (JSON white space
// around it is allowed, nothing else). It returns an EINVAL *Error saying why.
func CheckLogLine(line []byte) error {
	if len(line) > MaxLineBytes {
		return Errorf(syscall.EINVAL, "", "line of %d bytes is over the %d-byte limit", len(line), MaxLineBytes)
	}
	if !utf8.Valid(line) {
		return Errorf(syscall.EINVAL, "", "line is not valid UTF-8")
	}
	if bytes.IndexByte(line, '\n') >= 0 {
		return Errorf(syscall.EINVAL, "", "line contains a newline")
	}
	trimmed := bytes.TrimLeft(line, " \t\r")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return Errorf(syscall.EINVAL, "", "line is not a JSON object")
	}
	// Exactly one JSON object with white space around it, as json.Valid
	// takes one, so "{} {}" and "{}x" are refused: jsonscan's one pass,
	// about a fifth of json.Valid's time (docs/benchmarks.md, "A request's
	// parse"), and every line appended and request read is checked.
	if ok, _ := jsonscan.Members(line, nil); !ok {
		return Errorf(syscall.EINVAL, "", "line is not valid JSON")
	}
	return nil
}

// RuneCut is where to cut s so that at most n bytes come before the cut
// and no character is split: n itself, or the start of the character
// that spans it.
func RuneCut(s string, n int) int {
	if n >= len(s) {
		return len(s)
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}

// MaxMessageText bounds the text of one assistant message the server
// records of a model's text (SplitText), so that its line stays well
// within MaxLineBytes even when JSON escapes every byte (\u00XX is six).
const MaxMessageText = MaxLineBytes / 8

// SplitText cuts text into pieces of at most max bytes, at rune
// boundaries: text longer than one line may hold is recorded as several
// assistant messages, in order.
func SplitText(text string, max int) []string {
	var out []string
	for len(text) > max {
		cut := RuneCut(text, max)
		out = append(out, text[:cut])
		text = text[cut:]
	}
	return append(out, text)
}

// Clip is s when it holds at most max bytes; otherwise its first max
// bytes or fewer, cut on a character boundary, and "…" to say it was cut.
func Clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return s[:RuneCut(s, max)] + "…"
}
