package session

import (
	"context"

	"github.com/ctxfs/ctxfs/proto"
)

// Reply is one request's stream of frames. Next blocks until the next frame
// or the end (io.EOF). Close detaches the reader; a run goes on without it.
type Reply struct {
	next func(ctx context.Context) (*proto.Object, error)
	stop func()
}

// Next returns the next frame, or io.EOF after the last one.
func (r *Reply) Next(ctx context.Context) (*proto.Object, error) { return r.next(ctx) }

// Close detaches the reader. It never stops a run.
func (r *Reply) Close() {
	if r.stop != nil {
		r.stop()
	}
}
