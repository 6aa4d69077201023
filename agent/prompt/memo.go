package prompt

import (
	"bytes"
	"slices"
	"sort"
	"sync"
	"unsafe"

	"github.com/ctxfs/ctxfs/agent/modelapi"
	"github.com/ctxfs/ctxfs/agent/window"
)

// Memos are what prompts keep for the next ones: the logs they were read
// from (logMemo) and the turns of those logs' lines (turnCache), each
// bounded in all and per uid. One engine holds one, made with it, so
// that what is kept lives and goes with the server that read it.
type Memos struct {
	logs  *logMemo
	turns *turnCache
}

// NewMemos makes empty memos, as a server's start finds them.
func NewMemos() *Memos {
	return newMemos(logMemoBytes, logMemoEntries, turnCacheBytes, turnUidBytes)
}

func newMemos(logBound, logsMost, turnBound, turnUidBound int) *Memos {
	turns := newTurnCache(turnBound, turnUidBound)
	return &Memos{logs: newLogMemo(logBound, logsMost, turns), turns: turns}
}

// logMemo keeps, for the logs prompts were read from lately, where
// each line ends and, for the lines a prompt needed, its turn and the
// turn's tokens. A session's next prompt reads the same log with a few
// lines more at its end (or the same lines from a later start, once the
// log outgrew the tail a prompt reads), and looking each of thousands of
// lines up in the turn cache again was most of what a long conversation's
// prompt cost before its request could go (docs/benchmarks.md, "The
// request body"). A log read before is found by its source (the
// session's log itself) or by its bytes: an entry is then used only for
// the same uid's prompts and when its text is byte for byte the new
// log's start at the same offset, so what is handed out is what reading
// the log afresh gives, nothing of one session's text can reach
// another's prompt, and no user can time whether another's log is here.
// One uid's entries are at most a quarter of the count.

const (
	// logMemoBytes bounds what the memo holds (the logs it keeps, their
	// lines and turns); logMemoEntries bounds how many logs, so that a
	// look through them stays short.
	logMemoBytes   = 32 << 20
	logMemoEntries = 64
	// lineBytes is what the memo holds for a line beyond its text.
	lineBytes = 16
)

// logLine is one line of a read log: its end, and its turn once read.
type logLine struct {
	end    int64 // the log's offset just past the line's newline
	tokens int32 // window.TurnTokens of its turn, once read
	turn   int32 // 0: not read yet; -1: read, not a turn; k: readLog.turns[k-1]
}

// readLog is a log's whole lines: text a copy of the log from offset start
// to the end of its last whole line, lines where each ends, turns the
// turns read. An entry belongs to one caller at a time (take, then put),
// which alone reads and writes it meanwhile. Its text is only ever
// appended to, so the lines' bytes handed out are never written again.
type readLog struct {
	uid   uint32 // whose prompt read it: its lines' turns are looked up as this uid's
	start int64
	text  []byte
	lines []logLine
	turns []modelapi.Turn
	dead  int // turns of lines dropped by rebase
	size  int // what it holds, as the memo counts it
	cut   *promptCut
	// src, when set, is the log read (NewFrom), and changes its
	// Changes when it was read: the entry is found by them, not by bytes.
	src     LogSource
	changes uint64
	// tailFrom is the least offset a tail of src may start from to be
	// read from this entry: no line starts in [tailFrom, start).
	tailFrom int64
}

// promptCut is the last prompt read from a log when every turn after its
// first line fitted: the next prompt of the log, which has only grown,
// takes the turns of its new lines alone when they fit too (under the
// new prompt's budget, which need not be the last one's), instead of
// counting and copying every line again (docs/benchmarks.md, "The
// prompt's cut"). Its slices are handed out with their capacity cut to
// their length and are only appended to, so a prompt handed out never
// sees a later one's turns, and a caller's append copies them.
type promptCut struct {
	first, end int // the lines [first, end), every turn of them taken
	// tokens is the tokens of their turns, and firstTokens of the first
	// line's (0 if it is no turn): a prompt takes its oldest line only
	// while what it took after it is within the budget.
	tokens, firstTokens int
	turns               []modelapi.Turn
	lines               []Line
}

// held is what the memo counts for c: its slices' arrays (the turns'
// strings are the read log's own).
func (c *promptCut) held() int {
	if c == nil {
		return 0
	}
	return cap(c.turns)*int(unsafe.Sizeof(modelapi.Turn{})) + cap(c.lines)*int(unsafe.Sizeof(Line{}))
}

// logMemo is a small set of read logs, the latest first.
type logMemo struct {
	mu                sync.Mutex
	logs              []*readLog
	size, bound, most int
	compared          int        // logs compared whole, ever (for the tests)
	turns             *turnCache // where a line's turn is looked up (logView.Turn)
}

// maxCompares bounds the logs a take compares whole.
const maxCompares = 4

func newLogMemo(bound, most int, turns *turnCache) *logMemo {
	return &logMemo{bound: bound, most: most, turns: turns}
}

// logView is the lines of one log as a prompt reads them: a read log's
// lines, then the log's last line if it lacks its newline (read each time,
// never kept).
type logView struct {
	r       *readLog
	partial []byte
	turns   *turnCache
}

// lines calls use with the lines of log (starting at offset start), read
// for uid's prompt; the view is use's only while it runs.
func (c *logMemo) lines(uid uint32, log []byte, start int64, use func(v *logView)) {
	whole := log[:bytes.LastIndexByte(log, '\n')+1]
	r := c.take(uid, whole, start)
	r.extend(whole)
	use(&logView{r: r, partial: log[len(whole):], turns: c.turns})
	c.put(r)
}

// source calls use with the lines of src's last bound bytes, from the
// first line that starts in them (what sealedlog.Log.Tail gives); the view
// is use's only while it runs. An entry read from src before, while src's
// Changes stayed the same, holds its bytes: only those after it are read.
// A new entry is read for uid's prompt (an entry of src serves every
// prompt of src: src is one session's log).
func (c *logMemo) source(uid uint32, src LogSource, bound int64, use func(v *logView)) {
	changes := src.Changes() // before Size: see sealedlog.Log.Changes
	size := src.Size()
	from := size - min(size, bound) // the tail starts at the first line that starts here or later
	r := c.takeSource(src, changes)
	var more []byte
	if r != nil && r.start+int64(len(r.text)) <= size && from >= r.tailFrom {
		more = readRange(src, r.start+int64(len(r.text)), size)
	} else {
		start, tail, ok := readTail(src, from, size)
		if !ok { // no line starts in the tail: nothing to show, nothing to keep
			use(&logView{r: &readLog{start: size}, turns: c.turns})
			return
		}
		r, more = &readLog{uid: uid, src: src, changes: changes, start: start, tailFrom: from}, tail
	}
	whole := more[:bytes.LastIndexByte(more, '\n')+1]
	r.extendBy(whole)
	partial := more[len(whole):]
	if start := r.lineStartFrom(from); start > r.start {
		r.rebase(start)
		r.tailFrom = from // no line starts in [from, start)
	}
	if r.start+int64(len(r.text)) < from {
		partial = nil // it started before the tail: Tail leaves it out
	}
	use(&logView{r: r, partial: partial, turns: c.turns})
	c.put(r)
}

// readRange is src's bytes [from, to); what cannot be read is left out,
// as sealedlog.Log.Tail leaves it.
func readRange(src LogSource, from, to int64) []byte {
	b := make([]byte, to-from)
	n, _ := src.ReadAt(b, from)
	return b[:n]
}

// readTail is src's bytes from the first line that starts at or after
// from up to size, and where that line starts; false if none does. It is
// sealedlog.Log.Tail's rule, not a call of it: Tail reads the log's size
// itself, and the entry's tailFrom must be the from of the size this
// read was cut at, which a log that grew in between would make another.
func readTail(src LogSource, from, size int64) (int64, []byte, bool) {
	if from == 0 {
		return 0, readRange(src, 0, size), true
	}
	b := readRange(src, from-1, size) // the byte before: is from a line's start?
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return 0, nil, false
	}
	return from + int64(i), b[i+1:], true
}

// takeSource removes from the memo and returns the entry read from src
// while its Changes were changes; nil if there is none.
func (c *logMemo) takeSource(src LogSource, changes uint64) *readLog {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, r := range c.logs {
		if r.src == src && r.changes == changes {
			c.logs = slices.Delete(c.logs, i, i+1)
			c.size -= r.size
			return r
		}
	}
	return nil
}

// lineStartFrom is where r's first line that starts at or after off
// starts; the end of r's text when none does.
func (r *readLog) lineStartFrom(off int64) int64 {
	if off <= r.start {
		return r.start
	}
	k := sort.Search(len(r.lines), func(i int) bool { return r.lines[i].end > off })
	if k > 0 && r.lines[k-1].end == off {
		return off
	}
	if k < len(r.lines) {
		return r.lines[k].end
	}
	return r.start + int64(len(r.text))
}

// names reports whether c names a line of the view's history: one of its
// whole lines that ends at c.End with c's hash, or a line before it (it
// cannot be checked there, and all of the view follows it).
func (v *logView) names(c window.Cursor) bool {
	r := v.r
	if c.End <= r.start {
		return true
	}
	i := sort.Search(len(r.lines), func(i int) bool { return r.lines[i].end >= c.End })
	return i < len(r.lines) && r.lines[i].end == c.End && window.LineHash(v.Line(i).Text) == c.Hash
}

// Len is the number of lines.
func (v *logView) Len() int {
	if len(v.partial) > 0 {
		return len(v.r.lines) + 1
	}
	return len(v.r.lines)
}

// End is where line i ends: just past its newline (the last line, which
// has none, as if it had).
func (v *logView) End(i int) int64 {
	if i == len(v.r.lines) {
		return v.r.start + int64(len(v.r.text)+len(v.partial)) + 1
	}
	return v.r.lines[i].end
}

// Line is line i.
func (v *logView) Line(i int) Line {
	r := v.r
	if i == len(r.lines) {
		return Line{End: v.End(i), Text: v.partial}
	}
	from := r.start
	if i > 0 {
		from = r.lines[i-1].end
	}
	a, b := int(from-r.start), int(r.lines[i].end-r.start)-1
	return Line{End: r.lines[i].end, Text: r.text[a:b:b]}
}

// Turn is line i's turn (TurnOf) and its tokens, read once.
func (v *logView) Turn(i int) (modelapi.Turn, int, bool) {
	r := v.r
	if i == len(r.lines) {
		t, ok := v.turns.turnOf(r.uid, v.partial)
		return t, window.TurnTokens(t), ok
	}
	l := &r.lines[i]
	if l.turn == 0 {
		t, ok := v.turns.turnOf(r.uid, v.Line(i).Text)
		l.turn, l.tokens = -1, int32(window.TurnTokens(t))
		if ok {
			r.turns = append(r.turns, t)
			l.turn = int32(len(r.turns))
			r.size += entrySize("", cachedTurn{turn: t})
		}
	}
	if l.turn < 0 {
		return modelapi.Turn{}, int(l.tokens), false
	}
	return r.turns[l.turn-1], int(l.tokens), true
}

// grownCut is the turns, lines and their turns' tokens of the view's
// lines from first when the last prompt's cut, from the same first line,
// holds all of them but its new whole lines, and all of them fit budget;
// ok false when it does not apply (the caller counts afresh).
func (v *logView) grownCut(first, budget int) (turns []modelapi.Turn, lines []Line, tokens int, ok bool) {
	c, end := v.r.cut, len(v.r.lines)
	if c == nil || c.first != first || len(v.partial) > 0 || end < c.end {
		return nil, nil, 0, false
	}
	tokens = c.tokens
	for k := c.end; k < end; k++ {
		if _, n, ok := v.Turn(k); ok {
			tokens += n
		}
	}
	if budget != 0 && tokens-c.firstTokens > budget {
		return nil, nil, 0, false
	}
	v.r.size -= c.held()
	for k := c.end; k < end; k++ {
		if t, _, ok := v.Turn(k); ok {
			c.turns, c.lines = append(c.turns, t), append(c.lines, v.Line(k))
		}
	}
	v.r.size += c.held()
	c.end, c.tokens = end, tokens
	n := len(c.turns)
	return c.turns[:n:n], c.lines[:n:n], tokens, true
}

// keepCut keeps a prompt that took every turn from line first on, whose
// tokens they are, as the view's cut, unless the view's last line is
// half written (never kept).
func (v *logView) keepCut(first int, turns []modelapi.Turn, lines []Line, tokens int) {
	r := v.r
	r.size -= r.cut.held()
	r.cut = nil
	if len(v.partial) > 0 || len(turns) == 0 {
		return
	}
	_, firstTokens, ok := v.Turn(first)
	if !ok {
		firstTokens = 0
	}
	r.cut = &promptCut{first: first, end: len(r.lines), tokens: tokens, firstTokens: firstTokens, turns: turns, lines: lines}
	r.size += r.cut.held()
}

// take removes from the memo and returns a read log of uid's whose text
// is log's start at the same offset, the lines before start dropped; or
// a new one.
func (c *logMemo) take(uid uint32, log []byte, start int64) *readLog {
	c.mu.Lock()
	defer c.mu.Unlock()
	compares := 0
	for i, r := range c.logs {
		if r.src != nil || r.uid != uid {
			continue // found by its source alone: its bytes are the source's
		}
		rest, ok := r.from(start)
		if !ok || len(rest) == 0 || len(rest) > len(log) {
			continue
		}
		tail := max(0, len(rest)-64) // the last line's end first: another session's differs there
		if !bytes.Equal(rest[tail:], log[tail:len(rest)]) {
			continue
		}
		// Logs whose ends match are compared whole, at most maxCompares
		// of them: a user who fills the memo with logs that differ only
		// deep inside cannot make every prompt compare them all.
		if compares++; compares > maxCompares {
			break
		}
		c.compared++
		if bytes.Equal(rest[:tail], log[:tail]) {
			c.logs = slices.Delete(c.logs, i, i+1)
			c.size -= r.size
			r.rebase(start)
			return r
		}
	}
	return &readLog{uid: uid, start: start}
}

// from is r's text from offset start, when a line of r begins there.
func (r *readLog) from(start int64) ([]byte, bool) {
	skip := start - r.start
	if skip < 0 || skip > int64(len(r.text)) || skip > 0 && r.text[skip-1] != '\n' {
		return nil, false
	}
	return r.text[skip:], true
}

// rebase drops the lines that end at or before start, a line's end, and
// the turns of dropped lines once they are most of those kept.
func (r *readLog) rebase(start int64) {
	if start == r.start {
		return
	}
	k := sort.Search(len(r.lines), func(i int) bool { return r.lines[i].end > start })
	for _, l := range r.lines[:k] {
		if l.turn > 0 {
			r.dead++
		}
	}
	r.size -= int(start-r.start) + k*lineBytes
	r.text, r.lines, r.start = r.text[start-r.start:], r.lines[k:], start
	r.size -= r.cut.held() // its lines' numbers no longer hold
	r.cut = nil
	if r.dead > len(r.turns)/2 {
		r.compact()
	}
}

// compact keeps only the turns of lines kept.
func (r *readLog) compact() {
	turns := make([]modelapi.Turn, 0, len(r.turns)-r.dead)
	for i := range r.lines {
		if l := &r.lines[i]; l.turn > 0 {
			turns = append(turns, r.turns[l.turn-1])
			l.turn = int32(len(turns))
		}
	}
	for _, t := range r.turns {
		r.size -= entrySize("", cachedTurn{turn: t})
	}
	for _, t := range turns {
		r.size += entrySize("", cachedTurn{turn: t})
	}
	r.turns, r.dead = turns, 0
}

// extend adds the lines of log (whole lines, r's text its start) that r
// does not hold yet.
func (r *readLog) extend(log []byte) { r.extendBy(log[len(r.text):]) }

// extendBy adds whole lines that follow r's.
func (r *readLog) extendBy(more []byte) {
	if len(more) == 0 {
		return
	}
	from := len(r.text)
	r.text = append(r.text, more...)
	rest, off := r.text[from:], r.start+int64(from)
	n := bytes.Count(rest, []byte{'\n'})
	r.lines = slices.Grow(r.lines, n)
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		off += int64(i) + 1
		r.lines = append(r.lines, logLine{end: off})
		rest = rest[i+1:]
	}
	r.size += len(more) + n*lineBytes
}

// put keeps r as the latest, dropping r's uid's oldest past its share of
// the count, then the oldest of all past the bounds; a log with no whole
// line, or larger than half the bound, is not kept.
func (c *logMemo) put(r *readLog) {
	if len(r.text) == 0 || r.size > c.bound/2 { // nothing to find it by, or too large
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.logs = slices.Insert(c.logs, 0, r)
	c.size += r.size
	mine := 0 // r's uid's logs, the latest first: those beyond its share go
	c.logs = slices.DeleteFunc(c.logs, func(o *readLog) bool {
		if o.uid != r.uid {
			return false
		}
		if mine++; mine <= max(1, c.most/uidShare) {
			return false
		}
		c.size -= o.size
		return true
	})
	for len(c.logs) > c.most || c.size > c.bound {
		last := len(c.logs) - 1
		c.size -= c.logs[last].size
		c.logs[last] = nil
		c.logs = c.logs[:last]
	}
}

// uidShare: one uid's read logs are at most 1/uidShare of the memo's
// count.
const uidShare = 4
