package window

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// A message's id (SPEC 18: the summary names the last message it covers)
// is where its line ends in the session's messages.jsonl: the byte
// offset just past its newline. messages.jsonl only grows, so the id of
// a message never changes and later messages have larger ids; with it
// the summary keeps the line's hash, so that a cursor into a different
// history is seen as one (the summary is then rebuilt).

// Cursor is the last message a summary covers.
type Cursor struct {
	End  int64  // the message's id: offset just past its line in messages.jsonl (0: none)
	Hash string // LineHash of that line
}

// LineHash is the short hash a cursor keeps of its line (without the
// newline): 16 hex digits of its SHA-256.
func LineHash(line []byte) string {
	sum := sha256.Sum256(line)
	return hex.EncodeToString(sum[:8])
}

// headerPrefix starts the first line of context/summary.md; the line is an
// HTML comment so that the file stays plain Markdown.
const headerPrefix = "<!-- ctxfs summary: cursor="

// FormatSummary is the content of context/summary.md: the cursor line,
// then the summary's text.
func FormatSummary(c Cursor, text string) []byte {
	return fmt.Appendf(nil, "%s%d line-sha256=%s -->\n%s", headerPrefix, c.End, c.Hash, text)
}

// ParseSummary reads context/summary.md; ok is false when its first line
// is not a cursor line this package wrote (the summary is then rebuilt).
func ParseSummary(b []byte) (c Cursor, text string, ok bool) {
	s := string(b)
	head, text, found := strings.Cut(s, "\n")
	if !found || !strings.HasPrefix(head, headerPrefix) || !strings.HasSuffix(head, " -->") {
		return Cursor{}, "", false
	}
	fields := strings.Fields(strings.TrimSuffix(strings.TrimPrefix(head, headerPrefix), " -->"))
	if len(fields) != 2 || !strings.HasPrefix(fields[1], "line-sha256=") {
		return Cursor{}, "", false
	}
	end, err := strconv.ParseInt(fields[0], 10, 64)
	c = Cursor{End: end, Hash: strings.TrimPrefix(fields[1], "line-sha256=")}
	if err != nil || end <= 0 || len(c.Hash) != 16 || strconv.FormatInt(end, 10) != fields[0] {
		return Cursor{}, "", false
	}
	return c, text, true
}
