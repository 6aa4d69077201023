package session

import (
	"context"
	"log/slog"

	"github.com/ctxfs/ctxfs/abi"
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

// maxLoggedReason bounds the reason of a refusal in the log: it may quote
// a name the client chose, of any length.
const maxLoggedReason = 200

// LogRefused logs a request refused to c at debug level, the same way
// whichever transport it came through (an agent's socket, a session's
// ctl file): the errno, the op ("" when the request did not parse), the
// agent or model it was addressed to, who asked, and why, the reason cut
// short. Never the request itself: it holds the caller's input.
func (e *Engine) LogRefused(c layout.Caller, t Target, op string, err error) {
	log := e.cfg.Log
	if !log.Enabled(context.Background(), slog.LevelDebug) {
		return // the reason is not even formatted
	}
	log.Debug("refused", "errno", abi.ErrnoName(abi.Errno(err)), "op", op, t.Kind, t.Owner, "uid", c.Uid, "pid", c.Pid, "reason", abi.Clip(err.Error(), maxLoggedReason))
}
