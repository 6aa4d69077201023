package session

import (
	"context"
	"io"
	"sync"

	"github.com/ctxfs/ctxfs/proto"
)

// stream is the live frames of one run, kept in memory while it runs so
// that any number of readers (the sender, replays, resumes) can follow it
// at their own pace without ever slowing the run.
type stream struct {
	mu     sync.Mutex
	frames []*proto.Object
	ended  bool
	wake   chan struct{} // closed and replaced at every change
}

func newStream() *stream { return &stream{wake: make(chan struct{})} }

func (st *stream) push(f *proto.Object) {
	st.mu.Lock()
	st.frames = append(st.frames, f)
	close(st.wake)
	st.wake = make(chan struct{})
	st.mu.Unlock()
}

func (st *stream) end() {
	st.mu.Lock()
	if !st.ended {
		st.ended = true
		close(st.wake)
	}
	st.mu.Unlock()
}

// len is how many frames the stream holds now.
func (st *stream) len() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.frames)
}

// at returns frame i, or the channel to wait on, or ended.
func (st *stream) at(i int) (f *proto.Object, wait <-chan struct{}, ended bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if i < len(st.frames) {
		return st.frames[i], nil, false
	}
	return nil, st.wake, st.ended
}

// follow is a position in a stream.
type follow struct {
	st   *stream
	next int
}

// newReply answers with the fixed frames first, then every frame of each
// followed stream in turn until it ends.
func newReply(fixed []*proto.Object, follows ...follow) *Reply {
	r := &Reply{}
	stopped := make(chan struct{})
	var once sync.Once
	r.stop = func() { once.Do(func() { close(stopped) }) }
	r.next = func(ctx context.Context) (*proto.Object, error) {
		for {
			if len(fixed) > 0 {
				f := fixed[0]
				fixed = fixed[1:]
				return f, nil
			}
			if len(follows) == 0 {
				return nil, io.EOF
			}
			fl := &follows[0]
			f, wait, ended := fl.st.at(fl.next)
			switch {
			case f != nil:
				fl.next++
				return f, nil
			case ended:
				follows = follows[1:]
				continue
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
	return r
}
