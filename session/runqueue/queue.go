// Package runqueue is the queue between a run's agent and its recorder
// (session/run_record.go): the frames the agent emits, each stamped with
// the run and the time as it comes, taken by the recorder in batches so
// that the agent never waits for a sync; the bound of what one run may
// stream; the cancel after which nothing more is taken; and the
// acknowledgements of the frames a caller waits to see recorded. It
// records nothing, decides no frame's content and never touches the store.
package runqueue

import (
	"sync"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/proto"
)

// Queue is one run's queue.
type Queue struct {
	run  string
	max  int    // bytes of frames the run may stream
	stop func() // stops the run that streamed more than max

	mu        sync.Mutex
	frames    []*proto.Object
	wake      chan struct{} // a token when the frames or finished changed
	finished  bool          // the agent is done; ok says how
	ok        bool
	cancelled bool // once set, nothing the agent emits is taken
	overflow  bool // stopped for streaming more than max
	streamed  int  // bytes of frames taken so far
	// acks are closed once their frame's batch is recorded (AddWait).
	acks map[*proto.Object]chan struct{}
}

// New is the queue of run, which may stream max bytes of frames (deltas
// included); beyond them stop is called, from a goroutine of its own.
func New(run string, max int, stop func()) *Queue {
	return &Queue{run: run, max: max, stop: stop, wake: make(chan struct{}, 1), acks: map[*proto.Object]chan struct{}{}}
}

// Stamp rebuilds a frame as {"type", "run", …its other fields…, "ts"}.
func Stamp(f *proto.Object, run string, t time.Time) *proto.Object {
	out := &proto.Object{Fields: make([]proto.Field, 0, len(f.Fields)+3)}
	out.Set("type", f.Str("type"))
	out.Set("run", run)
	for _, fl := range f.Fields {
		switch fl.Key {
		case "type", "run", "ts":
			continue
		}
		out.Fields = append(out.Fields, fl)
	}
	out.Set("ts", abi.TS(t))
	return out
}

// Add takes a frame from the agent, stamped now. After a cancel nothing is
// taken; a frame past the bound stops the run with an EFBIG error instead.
func (q *Queue) Add(f *proto.Object) {
	fr := Stamp(f, q.run, time.Now())
	q.mu.Lock()
	if !q.cancelled {
		q.streamed += len(fr.Line())
		if q.streamed > q.max {
			over := abi.Errorf(syscall.EFBIG, "run", "the run streamed more than %d bytes, the most one run may: stopped", q.max)
			q.frames = append(q.frames, Stamp(proto.ErrorFrame(over), q.run, time.Now()))
			q.cancelled, q.overflow = true, true
			go q.stop()
		} else {
			q.frames = append(q.frames, fr)
		}
	}
	q.mu.Unlock()
	q.poke()
}

// AddWait queues a frame whose recording the caller waits for: the frame
// as stamped, and a channel closed once its batch was handled (Ack);
// ECANCELED after a cancel.
func (q *Queue) AddWait(f *proto.Object) (*proto.Object, <-chan struct{}, error) {
	fr := Stamp(f, q.run, time.Now())
	ack := make(chan struct{})
	q.mu.Lock()
	if q.cancelled {
		q.mu.Unlock()
		return nil, nil, abi.Errorf(syscall.ECANCELED, "run", "the run was cancelled")
	}
	q.frames = append(q.frames, fr)
	q.acks[fr] = ack
	q.mu.Unlock()
	q.poke()
	return fr, ack, nil
}

// Ack wakes the AddWait callers whose frames a batch held.
func (q *Queue) Ack(frames []*proto.Object) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, fr := range frames {
		if ch := q.acks[fr]; ch != nil {
			close(ch)
			delete(q.acks, fr)
		}
	}
}

// Finish tells the recorder that the agent is done.
func (q *Queue) Finish(ok bool) {
	q.mu.Lock()
	q.finished, q.ok = true, ok
	q.mu.Unlock()
	q.poke()
}

// Cancel takes nothing more the agent emits.
func (q *Queue) Cancel() {
	q.mu.Lock()
	q.cancelled = true
	q.mu.Unlock()
}

func (q *Queue) poke() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Wake has a token when there is something to take.
func (q *Queue) Wake() <-chan struct{} { return q.wake }

// Take empties the queue: the frames, and once the agent is done, the
// run's final status ("ok", or the state it ends in).
func (q *Queue) Take() (frames []*proto.Object, final bool, status string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	frames, q.frames = q.frames, nil
	switch {
	case !q.finished:
	case q.overflow:
		final, status = true, abi.StateError
	case q.cancelled:
		final, status = true, abi.StateCancelled
	case !q.ok:
		final, status = true, abi.StateError
	default:
		final, status = true, "ok"
	}
	return frames, final, status
}
