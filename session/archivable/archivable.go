// Package archivable owns the engine's side of op archivable, gc's
// preview in one request (SPEC 12): the sessions the request names,
// checked one after the other by the engine's one set of archive rules,
// and the answer streamed as they are checked (a frame per session, then
// one checked frame), a bounded number of frames ahead of the reader,
// stopping when the reader leaves.
//
// It decides no protection and reads nothing itself: the engine hands it
// the check (the one its archive and the archive op's dry run use), for
// sessions of the container the engine located for the caller, so a
// request reaches only the caller's own home or a space it may use. It
// must never write, load a session, or import the engine, fs, server or
// cmd.
package archivable

import (
	"context"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/reply"
)

// FrameRoom is how many frames the checks get ahead of their reader
// before they wait: what a reader that does not read holds of the server
// is this and the request's names, whatever their number.
const FrameRoom = 64

// Answer checks each of names, sessions of ct, with check (nil: it would
// be archived now; else why not) in a goroutine of its own, and returns
// the reply that streams the outcomes in the order of names, then the
// checked frame. Closing the reply stops the checks.
func Answer(ct layout.Container, names []string, check func(layout.Ref) error) *reply.Reply {
	frames := make(chan *proto.Object, FrameRoom)
	ctx, stop := context.WithCancel(context.Background())
	go func() {
		defer close(frames)
		for _, name := range names {
			f := outcome(name, check(layout.Ref{Container: ct, Name: name}))
			if !send(ctx, frames, f) {
				return
			}
		}
		send(ctx, frames, proto.NewObject("type", proto.FrameChecked, "sessions", len(names)))
	}()
	return reply.FromChannel(frames, stop)
}

// outcome is the frame that says what check said of the session name.
func outcome(name string, err error) *proto.Object {
	if err == nil {
		return proto.NewObject("type", proto.FrameArchivable, "session", name)
	}
	return proto.NewObject("type", proto.FrameKept, "session", name, "code", abi.ErrnoName(abi.Errno(err)), "message", err.Error())
}

// send hands f to the reader; false once the reader left.
func send(ctx context.Context, frames chan<- *proto.Object, f *proto.Object) bool {
	select {
	case frames <- f:
		return true
	case <-ctx.Done():
		return false
	}
}
