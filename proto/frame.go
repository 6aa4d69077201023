package proto

import (
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
)

// Frame types.
const (
	FrameStart      = "start"
	FrameDelta      = "delta"
	FrameMessage    = "message"
	FrameToolCall   = "tool_call"
	FrameToolResult = "tool_result"
	FrameUsage      = "usage"
	FrameError      = "error"
	FrameDone       = "done"
	FrameState      = "state"
	FrameLog        = "log"
	FrameCancel     = "cancel"
	FrameStatus     = "status"
	FramePong       = "pong"
	FrameMatch      = "match"    // search: one message that holds the query
	FrameSearched   = "searched" // search: the last frame, with counts and whether matches were cut
	FrameImported   = "imported" // import: the one frame of a session imported
	// FrameBegun goes from the writer host to a follower alone, first on
	// the connection of a ctl request the follower relayed, when the
	// request was begun: every frame after it, an error frame included
	// (a resume replays recorded ones), is the reply's, not a refusal.
	// The follower never passes it on.
	FrameBegun = "begun"

	// Host-owned facts of SPEC 17: only the server records them, never an
	// agent program.
	FrameApprovalRequest = "approval_request" // a call waits for a person's decision
	FrameApprovalResult  = "approval_result"  // the decision, and who took it
	FrameQuestion        = "question"         // ask_user: a question waits for an answer
	FrameAnswer          = "answer"           // the answer, and who gave it
	FrameResumed         = "resumed"          // a waiting run continues after a restart
	FramePending         = "pending"          // op pending: one waiting call
	FramePendingEnd      = "pending_end"      // op pending: the last frame, with the count
)

// ErrorFrame is the frame that reports err: {"type":"error","code":"E…","message":"…"}.
func ErrorFrame(err error) *Object {
	return NewObject("type", FrameError, "code", abi.ErrnoName(abi.Errno(err)), "message", err.Error())
}

// FrameErrno returns the errno of an error frame's code, or 0 when f is not
// an error frame or its code is unknown.
func FrameErrno(f *Object) syscall.Errno {
	if f.Str("type") != FrameError {
		return 0
	}
	e, _ := abi.ErrnoFromName(f.Str("code"))
	return e
}
