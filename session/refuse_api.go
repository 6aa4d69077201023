package session

import (
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/layout"
)

// Refuse is what every transport does with a refused request, the same
// way through an agent's socket and a session's ctl file: the refusal is
// recorded (LogRefused) and its error frame is returned, the one answer
// the client reads. req is nil when the request did not parse.
func (e *Engine) Refuse(c layout.Caller, t Target, req *proto.Request, err error) *proto.Object {
	op := ""
	if req != nil {
		op = req.Op
	}
	e.LogRefused(c, t, op, err)
	return proto.ErrorFrame(err)
}
