package clienv

import (
	"fmt"
	"io"
	"time"
)

// ProgressAfter is how many sessions a command works through before it
// shows its progress on a terminal: below it the answer comes too fast to
// need one.
const ProgressAfter = 300

// Progress is a single updating line on a terminal's stderr while a
// command works through many sessions (usage, gc); nil, and silent, for a
// short job or when stderr is not a terminal (pipelines stay quiet).
type Progress struct {
	w     io.Writer
	what  string // "usage: reading session"
	total int
	last  time.Time
	shown bool
}

func NewProgress(e *Env, what string, total int) *Progress {
	if total <= ProgressAfter || !IsTerminal(e.Stderr) {
		return nil
	}
	return &Progress{w: e.Stderr, what: what, total: total}
}

// Show reports that item i (from 0) is being worked on, at most ten times
// a second: a terminal need not redraw per item.
func (p *Progress) Show(i int) {
	if p == nil || time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.last = time.Now()
	fmt.Fprintf(p.w, "\rctx: %s %d of %d", p.what, i+1, p.total)
	p.shown = true
}

// Clear erases the line, so that what follows starts clean.
func (p *Progress) Clear() {
	if p == nil || !p.shown {
		return
	}
	fmt.Fprint(p.w, "\r\x1b[K")
	p.shown = false
	p.last = time.Time{}
}
