package session

import (
	"context"

	"github.com/ctxfs/ctxfs/proto"
)

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
