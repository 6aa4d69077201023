package agent

import (
	"context"
	"sync"

	"github.com/ctxfs/ctxfs/agent/modelapi"
	"github.com/ctxfs/ctxfs/agent/provider"
	"github.com/ctxfs/ctxfs/proto"
)

// Early is a model API run's first request, sent while the engine makes
// the run's start durable, so that the provider answers during the
// start's sync instead of after it (docs/benchmarks.md, "The first delta
// of a model run"). What it receives is held: the run takes it (Spec.Early)
// only once its start is durable, and then emits the held deltas first;
// a start that cannot be recorded aborts it (Abort), and nothing it
// received is ever emitted.
type Early struct {
	cfg    modelapi.Config
	cancel context.CancelFunc
	over   chan struct{} // closed when the request has ended

	mu   sync.Mutex
	held []string            // deltas the run has not taken yet
	emit func(*proto.Object) // the run's, once it took the request
	res  modelapi.Result
	err  error
}

// AskEarly sends the first request of s's run (a model API run with its
// Prompt, not resumed) unless its key cannot be read or its prompt must
// be compacted first (a compaction asks the provider and writes
// context/summary.md: not before the start is durable): nil then, and the
// run asks when it starts. Cancelling ctx aborts the request.
func AskEarly(ctx context.Context, s Spec) *Early {
	d := s.Def
	if d == nil || !d.AnsweredByAPI() || d.CLI != nil || d.Restore != nil || s.Resume != nil || s.Prompt == nil {
		return nil
	}
	cfg, err := apiConfig(s)
	if err != nil {
		return nil // the run reports it
	}
	l := &toolLoop{s: s}
	l.firstRequest()
	if !l.fits() {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	e := &Early{cfg: cfg, cancel: cancel, over: make(chan struct{})}
	req := l.sent()
	go func() {
		defer close(e.over)
		res, err := provider.Stream(ctx, cfg, req, e.delta)
		e.mu.Lock()
		e.res, e.err = res, err
		e.mu.Unlock()
	}()
	return e
}

// config is the provider's settings of the run: the early request's, or
// read now (nil e).
func (e *Early) config(s Spec) (modelapi.Config, error) {
	if e == nil {
		return apiConfig(s)
	}
	return e.cfg, nil
}

// delta holds a piece of text until the run takes the request, then
// emits it at once (from the request's goroutine: the run waits in take
// meanwhile, so its frames stay in order).
func (e *Early) delta(text string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.emit == nil {
		e.held = append(e.held, text)
		return
	}
	e.emit(deltaFrame(text))
}

// take hands the request to its run: the held deltas are emitted, later
// ones as they come, and take returns the request's outcome once it has
// ended. Cancelling ctx aborts the request.
func (e *Early) take(ctx context.Context, emit func(*proto.Object)) (modelapi.Result, error) {
	e.mu.Lock()
	for _, text := range e.held {
		emit(deltaFrame(text))
	}
	e.held, e.emit = nil, emit
	e.mu.Unlock()
	stop := context.AfterFunc(ctx, e.cancel)
	defer stop()
	<-e.over
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.res, e.err
}

// Abort cancels the request and returns once it has ended: nothing of it
// is emitted afterwards. Nil-safe; a request its run took has ended
// when the run's ask returned, and Abort then only frees it.
func (e *Early) Abort() {
	if e == nil {
		return
	}
	e.cancel()
	<-e.over
}

func deltaFrame(text string) *proto.Object {
	return proto.NewObject("type", proto.FrameDelta, "text", text)
}
