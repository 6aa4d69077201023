// Package prompttest holds the long session the prompt's benchmarks read,
// in package prompt and in agent (which fits it to a window): one
// definition of the log, so that their figures are of the same bytes.
package prompttest

import (
	"fmt"
	"strings"

	"github.com/ctxfs/ctxfs/agent/window"
)

// Messages is the session of the benchmarks: 100,000 messages.
const Messages = 100000

// Session is a messages.jsonl of n messages, users and assistants in
// turn, about 150 bytes a line, and the summary.md whose cursor names
// message at (counted from 1).
func Session(n, at int) (log, summary []byte) {
	var b strings.Builder
	var cursor window.Cursor
	for i := 1; i <= n; i++ {
		role := "user"
		if i%2 == 0 {
			role = "assistant"
		}
		line := fmt.Sprintf(`{"run":"ctx-%032x","ts":1700000000,"role":%q,"content":[{"type":"text","text":"message %d: the build of the parser fails on line %d"}]}`, i/2, role, i, i)
		b.WriteString(line + "\n")
		if i == at {
			cursor = window.Cursor{End: int64(b.Len()), Hash: window.LineHash([]byte(line))}
		}
	}
	return []byte(b.String()), window.FormatSummary(cursor, strings.Repeat("The user works on a parser. ", 100))
}

// Tail is the engine's view of a log: its last 4 MiB from a whole line
// (sealedlog.Log.Tail), and where that starts.
func Tail(log []byte) ([]byte, int64) {
	off := max(0, len(log)-4<<20)
	t := log[off:]
	if off > 0 {
		i := strings.IndexByte(string(t[:4096]), '\n')
		t, off = t[i+1:], off+i+1
	}
	return t, int64(off)
}
