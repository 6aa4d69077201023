package session

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/quota"
)

// Searches are paced (issue 19, finding 9): one uid's parallel searches of
// a large session took the CPU every other user's sends needed. Three
// bounds, in quota.Limits (session/quota/gate.go):
//
//   - a uid has at most SearchesPerUid searches under way (2): more are
//     refused EAGAIN at once, before anything is read;
//   - at most ScanSlots searches work at once server-wide (half the CPUs,
//     at least one), so the rest of the machine is left to everything
//     else; the others wait their turn. A search gives its slot back every
//     scanSlice of work and whenever it waits for its reader, so a slow
//     reader or a huge session delays the others by one slice, not by a
//     search; the waiting are bounded by the Searches quota's total;
//   - a search reads at most ScanBytes of messages.jsonl, to index or to
//     verify: beyond, its reply ends with the searched frame's "truncated"
//     true and "limit" "scan" (ctx says EFBIG). What it indexed stays, so
//     the next search goes further.
//
// A search works in a goroutine of its own that stops at its next read
// once its reply is closed (the reader left).

// scanSlice is how long a search works before it lets the searches
// waiting for a slot go first.
const scanSlice = 5 * time.Millisecond

// errScanBound ends a search that read all it may.
var errScanBound = errors.New("the search read as much as one search may")

// searchPace is one search's share of the server: its scan slot while it
// works, and the bytes it read. Used by the search's own goroutine only.
type searchPace struct {
	ctx   context.Context // done when the reply is closed
	gate  *quota.ScanGate
	limit int64 // bytes it may read
	read  int64 // bytes of messages.jsonl read so far
	cut   bool  // limit was reached
	held  bool
	since time.Time // when the slot was taken
}

// work is called before each piece of work: it fails once the reader
// left, and holds a slot for the work, waiting for one when none is held
// or when the one held was held for a slice.
func (p *searchPace) work() error {
	if err := p.ctx.Err(); err != nil {
		return err
	}
	if p.held && time.Since(p.since) >= scanSlice {
		p.pause()
	}
	if !p.held {
		if err := p.gate.Take(p.ctx); err != nil {
			return err
		}
		p.held, p.since = true, time.Now()
	}
	return nil
}

// pause gives the slot back: the search waits (for its reader) or ended.
func (p *searchPace) pause() {
	if p.held {
		p.gate.Give()
		p.held = false
	}
}

// charge counts n bytes about to be read, or refuses them: a search that
// would pass its bound reads nothing more.
func (p *searchPace) charge(n int) error {
	if p.read+int64(n) > p.limit {
		p.cut = true
		return errScanBound
	}
	p.read += int64(n)
	return nil
}

// stopped reports whether err ended the search (its reader left, or its
// bound was reached) rather than failing one session.
func (p *searchPace) stopped(err error) bool {
	return errors.Is(err, errScanBound) || p.ctx.Err() != nil && errors.Is(err, p.ctx.Err())
}

// send hands f to the reply's reader: without waiting when there is room,
// else with the slot given back meanwhile. False when the reader left.
func (p *searchPace) send(out chan<- *proto.Object, f *proto.Object) bool {
	select {
	case out <- f:
		return true
	default:
	}
	p.pause()
	select {
	case out <- f:
		return true
	case <-p.ctx.Done():
		return false
	}
}

// reader is log read at the search's pace: each read is work, and counts.
func (p *searchPace) reader(log io.ReaderAt) io.ReaderAt { return pacedReader{p, log} }

type pacedReader struct {
	p   *searchPace
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
