package prompt

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/ctxfs/ctxfs/agent/modelapi"
	"github.com/ctxfs/ctxfs/agent/window"
)

// owner0 is whose prompts the tests read, unless they say otherwise.
var owner0 = modelapi.Owner{Uid: 1000, Conversation: "home/1000/agent/coder/session/s"}

// memos are the memos the tests' prompts are read with, as an engine's
// are; a test that counts what they hold starts them afresh.
var memos = NewMemos()

// freshPrompt is New without the memos: every line of the log
// split and read afresh, as New read them before the memo.
func freshPrompt(system string, log []byte, start int64, summary []byte, budget int) *Prompt {
	p := &Prompt{Request: modelapi.Request{System: system, Owner: owner0}}
	c, text, ok := window.ParseSummary(summary)
	if ok && cursorMatches(c, log, start) {
		p.Summary, p.Cursor = text, c
	}
	lines := linesAfter(log, start, p.Cursor.End)
	used, i := 0, len(lines)
	for i > 0 && (budget == 0 || used <= budget) {
		i--
		if t, ok := TurnOf(lines[i].Text); ok {
			p.Turns = append([]modelapi.Turn{t}, p.Turns...)
			p.Lines = append([]Line{lines[i]}, p.Lines...)
			used += window.TurnTokens(t)
		}
	}
	if i > 0 {
		p.Older = lines[:i]
	}
	return p
}

// cursorMatches reports whether c names a line of the history whose end
// is log (starting at offset start): a line of log ending at c.End with
// c's hash, or a line before log (it cannot be checked there, and all of
// log follows it). What New did before its read logs' views.
func cursorMatches(c window.Cursor, log []byte, start int64) bool {
	end := start + int64(len(log))
	switch {
	case c.End > end:
		return false
	case c.End <= start:
		return true
	}
	i := int(c.End - start) // just past the line's newline
	if log[i-1] != '\n' {
		return false
	}
	line := log[bytes.LastIndexByte(log[:i-1], '\n')+1 : i-1]
	return window.LineHash(line) == c.Hash
}

// linesAfter are the lines of log (starting at offset start) that end
// after offset after.
func linesAfter(log []byte, start, after int64) []Line {
	var lines []Line
	off := start
	for len(log) > 0 {
		line, rest, _ := bytes.Cut(log, []byte("\n"))
		off += int64(len(line)) + 1
		log = rest
		if off > after {
			lines = append(lines, Line{End: off, Text: line})
		}
	}
	return lines
}

// memoLine is line i of a test session: users, assistants with tool
// calls, tool results, and lines that are no turn.
func memoLine(session string, i int) string {
	switch i % 5 {
	case 0:
		return fmt.Sprintf(`{"role":"user","content":"%s question %d"}`, session, i)
	case 1:
		return fmt.Sprintf(`{"role":"assistant","content":[{"type":"text","text":"looking %d"},{"type":"tool_call","id":"c%d","name":"fs.read","arguments":{"path":"%s"}}]}`, i, i, session)
	case 2:
		return fmt.Sprintf(`{"role":"tool","name":"fs.read","content":[{"type":"tool_result","tool_call_id":"c%d","content":"data %d","is_error":false}]}`, i-1, i)
	case 3:
		return fmt.Sprintf(`{"note":"not a message %d"}`, i)
	}
	return fmt.Sprintf(`{"role":"assistant","content":"%s answer %d é"}`, session, i)
}

// samePrompt fails unless New gives what reading afresh gives.
func samePrompt(t *testing.T, what string, log []byte, start int64, summary []byte, budget int) {
	t.Helper()
	asRead(t, what, memos.New(owner0, "sys", log, start, summary, budget), freshPrompt("sys", log, start, summary, budget))
}

// asRead fails unless got is want, the prompt read afresh.
func asRead(t *testing.T, what string, got, want *Prompt) {
	t.Helper()
	tokens := 0
	for _, t := range want.Turns {
		tokens += window.TurnTokens(t)
	}
	if !reflect.DeepEqual(got.Request, want.Request) || got.Summary != want.Summary || got.Cursor != want.Cursor || got.TurnTokens != tokens ||
		!sameLines(got.Lines, want.Lines) || !sameLines(got.Older, want.Older) {
		t.Fatalf("%s: New\n%+v\nread afresh\n%+v", what, got, want)
	}
}

// sameLines compares lines by their ends and bytes (nil and empty alike).
func sameLines(a, b []Line) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].End != b[i].End || !bytes.Equal(a[i].Text, b[i].Text) {
			return false
		}
	}
	return true
}

// TestPromptLogsAsFresh: as a session's log grows line by line (a last
// line sometimes half written), its tail's start moves on, a summary's
// cursor moves, a budget cuts, and another session with the same first
// lines and an edited copy are read between, every prompt is what
// reading its log afresh gives.
func TestPromptLogsAsFresh(t *testing.T) {
	memos = NewMemos()
	var log, other []byte
	var ends []int64
	for i := range 120 {
		log = append(log, memoLine("a", i)+"\n"...)
		other = append(other, memoLine(map[bool]string{true: "a", false: "b"}[i < 60], i)+"\n"...)
		ends = append(ends, int64(len(log)))
		start := int64(0)
		if i > 40 { // the tail a prompt reads starts at a later line
			start = ends[i-40]
		}
		var summary []byte
		if i > 10 {
			c := i / 2
			line := log[ends[c-1] : ends[c]-1]
			summary = window.FormatSummary(window.Cursor{End: ends[c], Hash: window.LineHash(line)}, "gist")
		}
		tail := log[start:]
		samePrompt(t, fmt.Sprintf("line %d", i), tail, start, summary, 0)
		samePrompt(t, fmt.Sprintf("line %d, budget", i), tail, start, nil, 100)
		samePrompt(t, fmt.Sprintf("line %d, half a line more", i), append(tail[:len(tail):len(tail)], memoLine("a", i+1)[:20]...), start, nil, 0)
		samePrompt(t, fmt.Sprintf("line %d, the other session", i), other[start:], start, nil, 0)
		edited := bytes.Replace(bytes.Clone(tail), []byte("question"), []byte("Question"), 1)
		samePrompt(t, fmt.Sprintf("line %d, edited", i), edited, start, nil, 0)
		memoHolds(t, logMemoBytes, logMemoEntries)
	}
}

// TestPromptCutAsFresh: sessions' logs that only grow, each read with
// its own budget (none, one the log outgrows, one it never reaches),
// one from a tail that starts later every 7 lines, and a summary's cursor that stays, then moves: every prompt is what
// reading the log afresh gives, though the cut of the prompt before is
// extended in place; a prompt handed out does not change after later
// ones, nor when its holder appends to its turns and lines, as a run
// does, and what the holder appended stays its own.
func TestPromptCutAsFresh(t *testing.T) {
	memos = NewMemos()
	budgets := []int{0, 400, 1 << 30, 0} // the last log's tail starts at a later line every 7 lines
	logs, ends := make([][]byte, len(budgets)), make([][]int64, len(budgets))
	type held struct {
		p            *Prompt
		turns, lines int
		want         *Prompt
	}
	var handed []held
	own := modelapi.Turn{Role: "user", Text: "the holder's own"}
	for i := range 150 {
		for b, budget := range budgets {
			logs[b] = append(logs[b], memoLine(fmt.Sprint("g", b), i)+"\n"...)
			ends[b] = append(ends[b], int64(len(logs[b])))
			log, start := logs[b], int64(0)
			if b == 3 && i >= 7 {
				start = ends[b][i/7*7-5]
			}
			var summary []byte
			if c := i / 50 * 25; c > 0 { // none, then a cursor at line 25, then at 50
				summary = window.FormatSummary(window.Cursor{End: ends[b][c], Hash: window.LineHash(log[ends[b][c-1] : ends[b][c]-1])}, "gist")
			}
			samePrompt(t, fmt.Sprintf("log %d, line %d, budget %d", b, i, budget), log[start:], start, summary, budget)
			p := memos.New(owner0, "sys", log[start:], start, summary, budget)
			handed = append(handed, held{p, len(p.Turns), len(p.Lines), freshPrompt("sys", log[start:], start, summary, budget)})
			p.Turns = append(p.Turns, own)
			p.Lines = append(p.Lines, Line{End: -1, Text: []byte(own.Text)})
		}
		memoHolds(t, logMemoBytes, logMemoEntries)
	}
	for k, h := range handed {
		if !reflect.DeepEqual(h.p.Turns[:h.turns], h.want.Turns) || !sameLines(h.p.Lines[:h.lines], h.want.Lines) ||
			!reflect.DeepEqual(h.p.Turns[h.turns], own) || h.p.Lines[h.lines].End != -1 {
			t.Fatalf("prompt %d changed after it was handed out", k)
		}
	}
}

// TestPromptLogsConcurrent: prompts of one log read at once, as a
// session's runs and window ops may, are each the log's (go test -race
// checks that no two touch one line at once).
func TestPromptLogsConcurrent(t *testing.T) {
	memos = NewMemos()
	var log []byte
	for i := range 200 {
		log = append(log, memoLine("c", i)+"\n"...)
	}
	want := freshPrompt("sys", log, 0, nil, 0)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 50 {
				n := len(log) - (g+k)%7*40 // some shorter, so that entries are extended
				n = bytes.LastIndexByte(log[:n], '\n') + 1
				p := memos.New(owner0, "sys", log[:n], 0, nil, 0)
				if n == len(log) && !reflect.DeepEqual(p.Turns, want.Turns) {
					t.Errorf("goroutine %d: other turns", g)
				}
			}
		}()
	}
	wg.Wait()
}

// TestLogMemoBounded: however many logs are read, the memo holds at most
// its bounds, and what it counts of each log is what the log holds.
func TestLogMemoBounded(t *testing.T) {
	const bound = 256 << 10
	memos = newMemos(bound, 8, turnCacheBytes, turnUidBytes)
	defer func() { memos = NewMemos() }()
	for s := range 40 {
		var log []byte
		for i := range 50 + s*10 {
			log = append(log, memoLine(fmt.Sprint("s", s), i)+"\n"...)
		}
		memos.New(owner0, "", log, 0, nil, 0)
		memos.New(owner0, "", log[len(log)/3:], int64(len(log)/3), nil, 0) // not a line's start: read anew
		memoHolds(t, bound, 8)
	}
}

// memoHolds fails unless memos.logs counts what each log holds (its text,
// its lines, the turns it keeps) and holds at most its bounds.
func memoHolds(t *testing.T, bound, most int) {
	t.Helper()
	c := memos.logs
	total := 0
	for _, r := range c.logs {
		want := len(r.text) + len(r.lines)*lineBytes
		for _, t := range r.turns {
			want += entrySize("", cachedTurn{turn: t})
		}
		want += r.cut.held()
		if r.size != want {
			t.Fatalf("log counted %d, holds %d", r.size, want)
		}
		total += r.size
	}
	if c.size != total || c.size > bound || len(c.logs) > most {
		t.Fatalf("memo counts %d, holds %d in %d logs (bounds %d, %d)", c.size, total, len(c.logs), bound, most)
	}
}

// TestLogMemoComparesBounded: a memo full of logs whose ends match a
// prompt's log and which differ only at their start costs the prompt at
// most maxCompares whole comparisons, and the prompt is still right.
func TestLogMemoComparesBounded(t *testing.T) {
	memos = NewMemos()
	var log []byte
	for i := range 100 {
		log = append(log, memoLine("d", i)+"\n"...)
	}
	for i := range 20 {
		other := bytes.Clone(log)
		copy(other[2:], fmt.Sprintf("%02d", i)) // inside the first line's first string
		memos.New(owner0, "sys", other, 0, nil, 0)
	}
	before := memos.logs.compared
	samePrompt(t, "after 20 logs that differ at their start", log, 0, nil, 0)
	if n := memos.logs.compared - before; n > maxCompares {
		t.Fatalf("one prompt compared %d logs whole, more than %d", n, maxCompares)
	}
}

// TestLogMemoByUid: a log read for one uid's prompt is not found for
// another uid's (read afresh: nothing is compared with the first), and
// its lines' turns are not taken from the turn cache for it; a uid that
// reads many logs pushes out its own beyond its share, never another's.
func TestLogMemoByUid(t *testing.T) {
	memos = NewMemos()
	var log []byte
	for i := range 50 {
		log = append(log, memoLine("u", i)+"\n"...)
	}
	memos.New(owner0, "sys", log, 0, nil, 0)
	first, turnsHeld, compared := memos.logs.logs[0], cacheSize(t, memos.turns), memos.logs.compared
	other := modelapi.Owner{Uid: 1001, Conversation: owner0.Conversation}
	want := freshPrompt("sys", log, 0, nil, 0)
	want.Owner = other
	asRead(t, "another uid's prompt of the same log", memos.New(other, "sys", log, 0, nil, 0), want)
	if memos.logs.compared != compared || len(memos.logs.logs) != 2 || memos.logs.logs[1] != first {
		t.Fatalf("another uid's prompt compared %d logs, and the memo holds %d", memos.logs.compared-compared, len(memos.logs.logs))
	}
	if grown := cacheSize(t, memos.turns) - turnsHeld; grown < len(log) {
		t.Fatalf("another uid's prompt added %d bytes to the turn cache: its lines' turns were taken from the first uid's", grown)
	}
	for i := range 40 {
		memos.New(modelapi.Owner{Uid: 7, Conversation: fmt.Sprint("home/7/agent/coder/session/", i)}, "sys", []byte(memoLine(fmt.Sprint("s", i), 0)+"\n"), 0, nil, 0)
	}
	mine, kept := 0, false
	for _, r := range memos.logs.logs {
		mine += map[bool]int{true: 1}[r.uid == 7]
		kept = kept || r == first
	}
	if mine != logMemoEntries/uidShare || !kept {
		t.Fatalf("after 40 logs of one uid the memo holds %d of them (want its share, %d); the first uid's log kept: %v", mine, logMemoEntries/uidShare, kept)
	}
}

// growingLog is a LogSource in memory, as a session's sealed log: it
// grows, and its end may be taken back (its Changes then count it).
type growingLog struct {
	b       []byte
	changes uint64
}

func (g *growingLog) Size() int64     { return int64(len(g.b)) }
func (g *growingLog) Changes() uint64 { return g.changes }

func (g *growingLog) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(g.b)) {
		return 0, io.EOF
	}
	n := copy(p, g.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// tailOf is what sealedlog.Log.Tail gives of b: its last bound bytes from
// the first line that starts in them, and where they start.
func tailOf(b []byte, bound int64) ([]byte, int64) {
	size := int64(len(b))
	off := size - min(size, bound)
	if off == 0 {
		return b, 0
	}
	i := bytes.IndexByte(b[off-1:], '\n')
	if i < 0 {
		return nil, size
	}
	return b[off+int64(i):], off + int64(i)
}

// TestPromptFromSourceAsFresh: prompts read from growing logs by their
// identity (NewFrom) are what reading their tails afresh gives, as
// the logs grow line by line and by halves of lines, their tails move on
// (a bound of 1,500 bytes, now and then a wider one, and one they never
// reach), a summary's cursor moves, budgets cut, and ends are taken back
// and written again with other lines (Changes counting it).
func TestPromptFromSourceAsFresh(t *testing.T) {
	memos = NewMemos()
	logs := []*growingLog{{}, {}, {}}
	bounds := []int64{1500, 4 << 20, 1500}
	ends := make([][]int64, len(logs))
	check := func(what string, k int, summary []byte, budget int) {
		t.Helper()
		tail, start := tailOf(logs[k].b, bounds[k])
		asRead(t, what, memos.NewFrom(owner0, "sys", logs[k], bounds[k], summary, budget), freshPrompt("sys", tail, start, summary, budget))
	}
	for i := range 120 {
		for k, g := range logs {
			line := memoLine(fmt.Sprint("s", k), i) + "\n"
			g.b = append(g.b, line[:len(line)/2]...)
			check(fmt.Sprintf("log %d, line %d, half", k, i), k, nil, 0)
			g.b = append(g.b, line[len(line)/2:]...)
			ends[k] = append(ends[k], int64(len(g.b)))
			var summary []byte
			if i > 10 {
				c := i / 3
				summary = window.FormatSummary(window.Cursor{End: ends[k][c], Hash: window.LineHash(g.b[ends[k][c-1] : ends[k][c]-1])}, "gist")
			}
			check(fmt.Sprintf("log %d, line %d", k, i), k, summary, 0)
			check(fmt.Sprintf("log %d, line %d, budget", k, i), k, nil, 100)
			if k == 0 && i%10 == 9 { // a wider bound once: its tail starts earlier
				bounds[k] = 4 << 20
				check(fmt.Sprintf("log %d, line %d, a wider bound", k, i), k, nil, 0)
				bounds[k] = 1500
				check(fmt.Sprintf("log %d, line %d, the bound again", k, i), k, nil, 0)
			}
			if k == 1 { // a prompt of bytes that start as the log does and go on otherwise
				memos.New(owner0, "sys", append(bytes.Clone(g.b), "{}\n"...), 0, nil, 0)
			}
			if k == 0 && i == 60 { // a line longer than the bound, written in halves
				long := `{"role":"user","content":"` + strings.Repeat("w", 3000) + `"}` + "\n"
				g.b = append(g.b, long[:1600]...)
				check("a long line's first half", k, nil, 0)
				g.b = append(g.b, long[1600:]...)
				ends[k] = append(ends[k][:len(ends[k])-1], int64(len(g.b))-int64(len(long)), int64(len(g.b)))
				check("a long line", k, nil, 0)
				ends[k] = ends[k][:len(ends[k])-1] // the cursors name the memo lines
				g.b = g.b[:len(g.b)-len(long)]
				g.changes++
			}
			if k == 2 && i%9 == 8 { // the last two lines taken back and written again otherwise
				g.b, ends[k] = g.b[:ends[k][i-2]], ends[k][:i-1]
				g.changes++
				for j := i - 1; j <= i; j++ {
					g.b = append(g.b, memoLine("other", j)+"\n"...)
					ends[k] = append(ends[k], int64(len(g.b)))
				}
				check(fmt.Sprintf("log %d, line %d, taken back", k, i), k, nil, 0)
			}
		}
		memoHolds(t, logMemoBytes, logMemoEntries)
	}
	liar := logs[2]
	memos.NewFrom(owner0, "sys", liar, 4<<20, nil, 0)
	liar.b = liar.b[:len(liar.b)/2] // shrunk without saying so: whatever the prompt is, it is one
	memos.NewFrom(owner0, "sys", liar, 4<<20, nil, 0)
}
