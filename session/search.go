package session

import (
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/searchop"
)

// Full-text search (SPEC 14): op search finds the messages whose user or
// assistant text holds the query, in every session of the caller's home or
// space at one agent or model (or in one session). Which sessions, the
// caller's quota and the logs opened as a reader would are package
// searchop's; the index, the scan and the frames are package search's.
// The engine tells it what only the engine knows: a container's list
// order and what a loaded session has committed.
func (e *Engine) search(c layout.Caller, loc *location, req *proto.Request) (*Reply, error) {
	op := &searchop.Op{Root: e.root, Limits: e.limits, Log: e.cfg.Log, Order: e.listOrder, Committed: e.committedMessages}
	return op.Search(c.Uid, loc.ref, req)
}

// listOrder is ct's sessions as its index lists them; nil without one.
func (e *Engine) listOrder(ct layout.Container) []string {
	x, err := e.Index(ct)
	if err != nil {
		return nil
	}
	return x.List()
}

// committedMessages is the length of messages.jsonl the session r has
// committed, when it is loaded: a search reads no further.
func (e *Engine) committedMessages(r layout.Ref) (int64, bool) {
	if s, ok := e.sessions.Peek(r.Key()); ok && s.msgs != nil {
		return s.msgs.Size(), true
	}
	return 0, false
}
