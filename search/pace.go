package search

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/ctxfs/ctxfs/proto"
)

// Searches are paced (issue 19, finding 9): one uid's parallel searches of
// a large session took the CPU every other user's sends needed. The
// engine holds the bounds (internal/quota/gate.go: searches per uid, scan
// slots, bytes per search); a Pace is how one search keeps them:
//
//   - it works only while it holds one of the server's scan slots, and
//     gives its slot back every scanSlice of work and whenever it waits
//     for its reader, so a slow reader or a huge session delays the
//     others by one slice, not by a search;
//   - it reads at most Limit bytes of messages.jsonl, to index or to
//     verify: beyond, its reply ends with the searched frame's
//     "truncated" true and "limit" "scan". What it indexed stays, so the
//     next search goes further;
//   - it stops at its next read once Ctx is done (its reader left).

// Slots is the server's scan slots (quota.ScanGate).
type Slots interface {
	Take(ctx context.Context) error // waits for a slot, or for ctx
	Give()
}

// scanSlice is how long a search works before it lets the searches
// waiting for a slot go first.
const scanSlice = 5 * time.Millisecond

// errScanBound ends a search that read all it may.
var errScanBound = errors.New("the search read as much as one search may")

// Pace is one search's share of the server: its scan slot while it
// works, and the bytes it read. Used by the search's own goroutine only.
type Pace struct {
	Ctx   context.Context // done when the reply is closed
	Slots Slots
	Limit int64 // bytes it may read

	read  int64 // bytes of messages.jsonl read so far
	cut   bool  // Limit was reached
	held  bool
	since time.Time // when the slot was taken
}

// work is called before each piece of work: it fails once the reader
// left, and holds a slot for the work, waiting for one when none is held
// or when the one held was held for a slice.
func (p *Pace) work() error {
	if err := p.Ctx.Err(); err != nil {
		return err
	}
	if p.held && time.Since(p.since) >= scanSlice {
		p.Pause()
	}
	if !p.held {
		if err := p.Slots.Take(p.Ctx); err != nil {
			return err
		}
		p.held, p.since = true, time.Now()
	}
	return nil
}

// Pause gives the slot back: the search waits (for its reader) or ended.
func (p *Pace) Pause() {
	if p.held {
		p.Slots.Give()
		p.held = false
	}
}

// charge counts n bytes about to be read, or refuses them: a search that
// would pass its bound reads nothing more.
func (p *Pace) charge(n int) error {
	if p.read+int64(n) > p.Limit {
		p.cut = true
		return errScanBound
	}
	p.read += int64(n)
	return nil
}

// stopped reports whether err ended the search (its reader left, or its
// bound was reached) rather than failing one session.
func (p *Pace) stopped(err error) bool {
	return errors.Is(err, errScanBound) || p.Ctx.Err() != nil && errors.Is(err, p.Ctx.Err())
}

// send hands f to the reply's reader: without waiting when there is room,
// else with the slot given back meanwhile. False when the reader left.
func (p *Pace) send(out chan<- *proto.Object, f *proto.Object) bool {
	select {
	case out <- f:
		return true
	default:
	}
	p.Pause()
	select {
	case out <- f:
		return true
	case <-p.Ctx.Done():
		return false
	}
}

// reader is log read at the search's pace: each read is work, and counts.
func (p *Pace) reader(log io.ReaderAt) io.ReaderAt { return pacedReader{p, log} }

type pacedReader struct {
	p   *Pace
	log io.ReaderAt
}

func (r pacedReader) ReadAt(b []byte, off int64) (int, error) {
	if err := r.p.work(); err != nil {
		return 0, err
	}
	if err := r.p.charge(len(b)); err != nil {
		return 0, err
	}
	return r.log.ReadAt(b, off)
}
