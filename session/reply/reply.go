// Package reply owns a request's reply: its frames, fixed ones first,
// then those of the runs it follows (Stream), live, with the bound of how
// far a reader may fall behind a run, and a reply fed by a channel. It
// never reads or writes the store, never decides what a frame says, and
// never imports the engine: the engine makes the frames and hands them here.
package reply

import (
	"context"
	"io"
	"sync"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/proto"
)

// maxBehind bounds how far, in bytes of frames, the slowest reader of a
// run may fall behind it: the stream keeps only what some reader has not
// read yet, and a reader further behind than this is cut (its reply ends
// with an EAGAIN error frame; `resume` follows the run again from its
// record). A client that never reads costs the server at most this much
// and the frame pushed last.
const maxBehind = 1 << 20

// Stream is the live frames of one run for the readers that follow it
// (the sender, replays and resumes joined while it runs). It keeps a frame
// only until every reader has read it: a reader that joins later starts
// from the run's record in the log (the engine's sess.liveFrom), never from memory that
// grows with the run.
type Stream struct {
	mu      sync.Mutex
	frames  []streamed // what some reader has not read yet; frames[0] is number base
	base    int
	bytes   int // of frames
	pushed  int // bytes of every frame pushed so far
	ended   bool
	readers map[*Reader]bool
	wake    chan struct{} // closed and replaced at every change
}

type streamed struct {
	f    *proto.Object
	size int
	at   int // the stream's pushed bytes before it
}

// Reader is one reader's place in a stream.
type Reader struct {
	st   *Stream
	next int  // number of the next frame to read
	cut  bool // fell more than maxBehind behind: the stream dropped it
	kept bool // never cut (JoinKept)
}

func NewStream() *Stream { return &Stream{wake: make(chan struct{}), readers: map[*Reader]bool{}} }

// Join adds a reader that reads from the frame pushed next.
func (st *Stream) Join() *Reader { return st.join(false) }

// JoinKept is Join for a reader the server reads itself as the frames
// come (a child's watcher, session/children): it is never cut, since one
// frame over maxBehind (a model's long delta) cut every reader, and the
// watcher of a child then let the child go on unfollowed, past its
// parent's cancel. What it holds is bounded by what one run may stream.
func (st *Stream) JoinKept() *Reader { return st.join(true) }

func (st *Stream) join(kept bool) *Reader {
	st.mu.Lock()
	defer st.mu.Unlock()
	r := &Reader{st: st, next: st.base + len(st.frames), kept: kept}
	st.readers[r] = true
	return r
}

// Leave drops a reader that will not be read (a request refused after it
// joined); what only it had left to read is let go.
func (r *Reader) Leave() { r.st.leave(r) }

// leave drops a reader; what only it had left to read is let go.
func (st *Stream) leave(r *Reader) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.readers, r)
	st.trimLocked()
}

// Push hands f to every reader.
func (st *Stream) Push(f *proto.Object) {
	st.mu.Lock()
	size := len(f.Line())
	st.frames = append(st.frames, streamed{f, size, st.pushed})
	st.bytes += size
	st.pushed += size
	st.cutLocked()
	st.trimLocked()
	st.notifyLocked()
	st.mu.Unlock()
}

// End says no frame follows: each reader ends after the last.
func (st *Stream) End() {
	st.mu.Lock()
	if !st.ended {
		st.ended = true
		st.notifyLocked()
	}
	st.mu.Unlock()
}

func (st *Stream) notifyLocked() {
	close(st.wake)
	st.wake = make(chan struct{})
}

// cutLocked drops the slowest readers while the frames held for them,
// besides the one just pushed, are over maxBehind: a reader is cut for
// what it left unread, never for one long frame (a model's delta may be
// over maxBehind) it had no time to read, so a stream holds at most
// maxBehind and one frame for a reader that does not read. A kept reader
// is never cut, and the frames held for it alone cut no other.
func (st *Stream) cutLocked() {
	for st.bytes > maxBehind {
		var slowest *Reader
		for r := range st.readers {
			if !r.kept && (slowest == nil || r.next < slowest.next) {
				slowest = r
			}
		}
		if slowest == nil || st.behind(slowest)-st.frames[len(st.frames)-1].size <= maxBehind {
			return
		}
		slowest.cut = true
		delete(st.readers, slowest)
		st.trimLocked()
	}
}

// behind is the bytes of the frames r has still to read.
func (st *Stream) behind(r *Reader) int {
	if i := r.next - st.base; i < len(st.frames) {
		return st.pushed - st.frames[i].at
	}
	return 0
}

// trimLocked lets go of the frames every reader has read (all of them
// when no one reads).
func (st *Stream) trimLocked() {
	first := st.base + len(st.frames)
	for r := range st.readers {
		first = min(first, r.next)
	}
	for st.base < first {
		st.bytes -= st.frames[0].size
		st.frames[0] = streamed{}
		st.frames = st.frames[1:]
		st.base++
	}
}

// errBehind is what a cut reader gets.
var errBehind = abi.Errorf(syscall.EAGAIN, "follow", "the reader fell more than %d bytes behind the run, which goes on: resume follows it again", maxBehind)

// read returns the reader's next frame, or the channel to wait on, or
// ended; errBehind once the reader was cut.
func (r *Reader) read() (f *proto.Object, wait <-chan struct{}, ended bool, err error) {
	st := r.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if r.cut {
		return nil, nil, false, errBehind
	}
	if i := r.next - st.base; i < len(st.frames) {
		r.next++
		f = st.frames[i].f
		st.trimLocked()
		return f, nil, false, nil
	}
	return nil, st.wake, st.ended, nil
}

// New answers with the fixed frames first, then every frame of each
// followed stream in turn until it ends. A reader cut for falling behind
// gets one EAGAIN error frame, and the reply ends.
func New(fixed []*proto.Object, readers ...*Reader) *Reply {
	return NewFrom(func() (*proto.Object, error) {
		if len(fixed) == 0 {
			return nil, io.EOF
		}
		f := fixed[0]
		fixed[0], fixed = nil, fixed[1:] // a frame handed out is the reader's alone to hold
		return f, nil
	}, readers...)
}

// NewFrom is New with the first frames taken from first as the reply is
// read, until it says io.EOF: frames recorded in a log are read from it
// then, not held for a client that may never read them. Another error
// from first ends the reply with its error frame.
func NewFrom(first func() (*proto.Object, error), readers ...*Reader) *Reply {
	r := &Reply{}
	stopped := make(chan struct{})
	var once sync.Once
	all := append([]*Reader(nil), readers...) // leaving twice is harmless
	r.stop = func() {
		once.Do(func() {
			close(stopped)
			for _, rd := range all {
				rd.st.leave(rd)
			}
		})
	}
	// pull returns the next frame; when none is ready it waits for one
	// (block), or returns nil at once (TryNext).
	pull := func(ctx context.Context, block bool) (*proto.Object, error) {
		for {
			if first != nil {
				f, err := first()
				switch {
				case err == nil:
					return f, nil
				case err != io.EOF:
					r.stop()
					first, readers = nil, nil
					return proto.ErrorFrame(err), nil
				}
				first = nil
			}
			if len(readers) == 0 {
				return nil, io.EOF
			}
			rd := readers[0]
			f, wait, ended, err := rd.read()
			switch {
			case err != nil:
				rd.st.leave(rd)
				readers = nil
				return proto.ErrorFrame(err), nil
			case f != nil:
				return f, nil
			case ended:
				rd.st.leave(rd)
				readers = readers[1:]
				continue
			case !block:
				return nil, nil
			}
			select {
			case <-wait:
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-stopped:
				return nil, io.EOF
			}
		}
	}
	r.next = func(ctx context.Context) (*proto.Object, error) { return pull(ctx, true) }
	r.poll = func() (*proto.Object, error) { return pull(nil, false) }
	return r
}

// Reply is one request's stream of frames. Next blocks until the next frame
// or the end (io.EOF). Close detaches the reader; a run goes on without it.
type Reply struct {
	next func(ctx context.Context) (*proto.Object, error)
	// poll is next without waiting (nil: the reply cannot tell, and
	// TryNext always says nothing is ready).
	poll func() (*proto.Object, error)
	stop func()
}

// Next returns the next frame, or io.EOF after the last one.
func (r *Reply) Next(ctx context.Context) (*proto.Object, error) { return r.next(ctx) }

// TryNext returns the next frame if it is ready now, nil when Next would
// wait for it, or io.EOF after the last one. A transport writes what is
// ready with one write and flushes before it waits: the frames a commit
// releases at once (a fast agent's message, usage and done) then cost one
// system call, not one each.
func (r *Reply) TryNext() (*proto.Object, error) {
	if r.poll == nil {
		return nil, nil
	}
	return r.poll()
}

// Close detaches the reader. It never stops a run.
func (r *Reply) Close() {
	if r.stop != nil {
		r.stop()
	}
}

// Leading answers f first, then every frame of r.
func Leading(f *proto.Object, r *Reply) *Reply {
	take := func() *proto.Object {
		g := f
		f = nil
		return g
	}
	return &Reply{
		next: func(ctx context.Context) (*proto.Object, error) {
			if g := take(); g != nil {
				return g, nil
			}
			return r.Next(ctx)
		},
		poll: func() (*proto.Object, error) {
			if g := take(); g != nil {
				return g, nil
			}
			return r.TryNext()
		},
		stop: r.Close,
	}
}

// FromChannel is the reply whose frames come through frames, until it
// is closed; stop is called when the reader leaves.
func FromChannel(frames <-chan *proto.Object, stop func()) *Reply {
	return &Reply{
		next: func(ctx context.Context) (*proto.Object, error) {
			select {
			case f, ok := <-frames:
				if !ok {
					return nil, io.EOF
				}
				return f, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
		poll: func() (*proto.Object, error) {
			select {
			case f, ok := <-frames:
				if !ok {
					return nil, io.EOF
				}
				return f, nil
			default:
				return nil, nil
			}
		},
		stop: stop,
	}
}
