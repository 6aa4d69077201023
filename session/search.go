package session

import (
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/searchop"
)

// Full-text search (SPEC 14) is package searchop's (which sessions, the
// caller's quota, the logs opened as a reader would) and package search's
// (the index, the scan, the frames). The engine tells it what only the
// engine knows: a container's list order and what a loaded session has
// committed.
func (e *Engine) search(c layout.Caller, loc *location, req *proto.Request) (*Reply, error) {
	op := &searchop.Op{Root: e.root, Limits: e.limits, Log: e.cfg.Log, Order: e.listOrder, Committed: e.committedIn}
	return op.Search(c.Uid, loc.ref, req)
}

// listOrder is ct's sessions as its index lists them; nil without one.
func (e *Engine) listOrder(ct layout.Container) []string {
	if x, err := e.Index(ct); err == nil {
		return x.List()
	}
	return nil
}

// committedIn is, for a session of ct by name, what its messages.jsonl
// has committed when it is loaded (its cache key is its Rel: no temp).
func (e *Engine) committedIn(ct layout.Container) func(string) (int64, bool) {
	dir := ct.Rel() + "/"
	return func(name string) (int64, bool) {
		if s, ok := e.sessions.Peek(dir + name); ok && s.msgs != nil {
			return s.msgs.Size(), true
		}
		return 0, false
	}
}
