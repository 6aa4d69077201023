package clienv

import (
	"context"
	"io"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/proto"
)

// Call sends one short request to the agent's socket and returns its one
// answer frame of type want. A refusal, an unreachable server or any other
// answer is returned as an error.
func Call(e *Env, w *Where, req *proto.Object, want string) (client.Frame, error) {
	ctx, stop := e.Interrupt()
	defer stop()
	frames, err := client.Call(ctx, w.Loc.Socket(), req)
	if ctx.Err() != nil {
		return client.Frame{}, context.Canceled
	}
	if err != nil {
		return client.Frame{}, err
	}
	if se := client.Refusal(frames); se != nil {
		return client.Frame{}, se
	}
	for _, f := range frames {
		if f.Type() == want {
			return f, nil
		}
	}
	return client.Frame{}, abi.Errorf(syscall.EIO, "", "the server sent no %s frame", want)
}

// Exchange sends req to the agent's socket and hands each reply frame to
// each, until the reply ends. dialErr says the server could not be
// reached. A write error is kept, not reported at once: a server that
// refuses an oversized request may close before reading it all, and its
// error frame is the better answer; readErr is nil at a clean end.
func Exchange(ctx context.Context, w *Where, req *proto.Object, each func(client.Frame)) (sendErr, readErr, dialErr error) {
	return ExchangeIdle(ctx, w, req, each, nil)
}

// ExchangeIdle is Exchange that also calls idle (when not nil) each time
// it is about to wait for the server: every frame that has arrived was
// handed to each. A command that buffers its output flushes it there, so
// that what it printed is seen while the server works on.
func ExchangeIdle(ctx context.Context, w *Where, req *proto.Object, each func(client.Frame), idle func()) (sendErr, readErr, dialErr error) {
	conn, err := dialAgent(ctx, w.Loc)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	sendErr = conn.Send(req)
	for {
		if idle != nil && !conn.Buffered() {
			idle()
		}
		f, err := conn.Next()
		if err == io.EOF {
			return sendErr, nil, nil
		}
		if err != nil {
			return sendErr, err, nil
		}
		each(f)
	}
}

// dialAgent connects to the agent's socket. A definition made just before
// (mkdir NAME.d && ctx agent send NAME …, typed back to back) may not have
// its socket yet: while the directory is there and the server runs, the
// socket is waited for (client.SocketWait).
func dialAgent(ctx context.Context, loc client.Loc) (*client.Conn, error) {
	return client.DialWaiting(ctx, loc.Socket(), func() bool {
		return def.Defined(loc.Root, loc.Kind(), loc.Agent) && mounted(loc.Root)
	})
}

func NoReply(sendErr, readErr error) error {
	switch {
	case sendErr != nil:
		return sendErr
	case readErr != nil:
		return readErr
	}
	return abi.Errorf(syscall.EIO, "", "the server closed the connection without a reply")
}
