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
// before they wait: a reader that does not read holds of the server this
// many frames, which name no more than the request's own names.
const FrameRoom = 64

// maxGroup is how many sessions one archivable frame names: the
// sessions that would be archived come together in a frame, in order, so
// that ten thousand of them are a few dozen frames for the client to
// read, not ten thousand (docs/benchmarks.md#gc-preview).
const maxGroup = 256

// Answer checks each of names, sessions of ct, with check (nil: it would
// be archived now; else why not) in a goroutine of its own, and returns
// the reply that streams the outcomes in the order of names: the
// sessions that would be archived in archivable frames of at most
// maxGroup, each other one in a kept frame of its own where it comes,
// then the checked frame. Closing the reply stops the checks.
func Answer(ct layout.Container, names []string, check func(layout.Ref) error) *reply.Reply {
	frames := make(chan *proto.Object, FrameRoom)
	ctx, stop := context.WithCancel(context.Background())
	go func() {
		defer close(frames)
		a := &answer{ctx: ctx, frames: frames}
		for _, name := range names {
			if !a.add(name, check(layout.Ref{Container: ct, Name: name})) {
				return
			}
		}
		if a.flush() {
			a.send(proto.NewObject("type", proto.FrameChecked, "sessions", len(names)))
		}
	}()
	return reply.FromChannel(frames, stop)
}

// answer is an answer being sent: the sessions that would be archived
// and are not sent yet.
type answer struct {
	ctx    context.Context
	frames chan<- *proto.Object
	group  []string
}

// add takes what check said of the session name; false once the reader
// left.
func (a *answer) add(name string, err error) bool {
	if err == nil {
		a.group = append(a.group, name)
		return len(a.group) < maxGroup || a.flush()
	}
	return a.flush() && a.send(proto.NewObject("type", proto.FrameKept, "session", name, "code", abi.ErrnoName(abi.Errno(err)), "message", err.Error()))
}

// flush sends the group, if any; false once the reader left.
func (a *answer) flush() bool {
	if len(a.group) == 0 {
		return true
	}
	f := proto.NewObject("type", proto.FrameArchivable, "sessions", a.group)
	a.group = nil
	return a.send(f)
}

// send hands f to the reader; false once the reader left.
func (a *answer) send(f *proto.Object) bool {
	select {
	case a.frames <- f:
		return true
	case <-a.ctx.Done():
		return false
	}
}
