package prompt

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/agent/window"
)

// TestNewPromptCursor: the conversation is what follows the summary's
// cursor when the cursor names a line of this history; a cursor beyond
// the log, inside a line or with another line's hash is ignored (the whole
// log is the conversation, no summary); a cursor before the tail read is
// taken as it is.
func TestNewPromptCursor(t *testing.T) {
	var log strings.Builder
	var ends []int64
	var lines []string
	for i := 1; i <= 4; i++ {
		line := fmt.Sprintf(`{"role":"user","content":"m%d"}`, i)
		log.WriteString(line + "\n")
		ends, lines = append(ends, int64(log.Len())), append(lines, line)
	}
	b := []byte(log.String())
	at := func(i int) []byte {
		return window.FormatSummary(window.Cursor{End: ends[i], Hash: window.LineHash([]byte(lines[i]))}, "gist")
	}
	texts := func(p *Prompt) string {
		var s []string
		for _, t := range p.Turns {
			s = append(s, t.Text)
		}
		return strings.Join(s, ",")
	}
	if p := memos.New(owner0, "", b, 0, at(1), 0); texts(p) != "m3,m4" || p.Summary != "gist" || p.Lines[0].End != ends[2] {
		t.Fatalf("after m2: %q %q", texts(p), p.Summary)
	}
	bad := [][]byte{
		window.FormatSummary(window.Cursor{End: ends[3] + 1, Hash: window.LineHash([]byte(lines[3]))}, "gist"),
		window.FormatSummary(window.Cursor{End: ends[1] - 1, Hash: window.LineHash([]byte(lines[1]))}, "gist"),
		window.FormatSummary(window.Cursor{End: ends[1], Hash: window.LineHash([]byte(lines[0]))}, "gist"),
		[]byte("gist without a cursor line\n"),
	}
	for _, sum := range bad {
		if p := memos.New(owner0, "", b, 0, sum, 0); texts(p) != "m1,m2,m3,m4" || p.Summary != "" || p.Cursor.End != 0 {
			t.Errorf("summary %q taken: %q %q", sum, texts(p), p.Summary)
		}
	}
	// The tail starts at m3: a cursor at m1 is before it.
	if p := memos.New(owner0, "", b[ends[1]:], ends[1], at(0), 0); texts(p) != "m3,m4" || p.Summary != "gist" {
		t.Fatalf("cursor before the tail: %q %q", texts(p), p.Summary)
	}
	// A budget of one turn reads the newest only; the rest is Older.
	if p := memos.New(owner0, "", b, 0, nil, 1); texts(p) != "m4" || len(p.Older) != 3 {
		t.Fatalf("budget: %q older %d", texts(p), len(p.Older))
	}
}
