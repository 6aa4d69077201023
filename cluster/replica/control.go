package replica

import (
	"context"

	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/layout"
)

// Control relays a request written to a session's ctl file on this host's
// mount to the host that writes the store, as caller c's: line is the
// request line as c wrote it (proto.Request.Line), ref the session whose
// ctl it was. It returns once the writer answered the request's first
// frame (for a send, once its start is durable there), with the reply to
// read on, or the writer's refusal as an error with its errno (EAGAIN when
// no host writes now). The writer applies every rule (cluster/host).
type Control func(ctx context.Context, c layout.Caller, ref layout.Ref, line []byte) (*session.Reply, error)

// SetControl makes the ctl files writable on this host, each request
// relayed with fn; nil makes them EROFS again. Every other change stays
// EROFS: a ctl request changes nothing here, the writer makes it.
func (r *Replica) SetControl(fn Control) {
	if fn == nil {
		r.control.Store(nil)
		return
	}
	r.control.Store(&fn)
}

// relays says whether a change at pl is relayed rather than refused: a
// ctl file's, while SetControl holds a relay.
func (r *Replica) relays(pl layout.Place) bool {
	return pl.Kind == layout.PlaceCtl && r.control.Load() != nil
}

// BeginControl relays a ctl request to the writer host (SetControl), or
// refuses it with EROFS when this host relays none. A request the ctl
// file did not keep the line of cannot be relayed whole (EROFS).
func (r *Replica) BeginControl(ctx context.Context, c layout.Caller, ref layout.Ref, req *proto.Request) (*session.Reply, error) {
	fn := r.control.Load()
	if fn == nil || req.Line == nil {
		return nil, readOnly("control")
	}
	return (*fn)(ctx, c, ref, req.Line)
}
