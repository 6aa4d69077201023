package server

import (
	"context"
	"net"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/reply"
)

// ServeRemoteControl answers the one request of conn, written by caller c
// to the ctl file of session ref on another host's mount and relayed here
// (cluster/replica.Relay): the request is begun exactly as one written to
// that ctl file on this host's mount (Engine.BeginControl), after the
// checks the kernel makes there for c (tree.MayWrite: the other host
// vouches only for the uid), and answered with its frames as a socket's
// is, after one frame that says the request was begun
// (proto.FrameBegun): without it the follower could not tell a refusal
// from a reply whose first frame is an error recorded in the log (a
// resume's). conn is closed when it returns.
func (s *Sockets) ServeRemoteControl(conn net.Conn, c layout.Caller, ref layout.Ref) {
	defer conn.Close()
	c.Pid = 0 // a pid of another host means nothing here
	t := session.Target{Kind: ref.Container.Kind, Owner: ref.Container.Owner}
	s.serveWith(conn, c, t, layout.SpaceOf(ref.Home), func(e *session.Engine, req *proto.Request) (*session.Reply, error) {
		if err := e.MayWrite(c, ref.Rel()+"/"+abi.FileCtl); err != nil {
			return nil, err
		}
		r, err := e.BeginControl(context.Background(), c, ref, req)
		if err != nil {
			return nil, err
		}
		return reply.Leading(proto.NewObject("type", proto.FrameBegun), r), nil
	})
}
