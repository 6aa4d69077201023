package session

import (
	"context"
	"encoding/hex"
	"os"
	"path"
	"sort"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/search"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/reply"
)

// Full-text search (SPEC 14): op search finds the messages whose user or
// assistant text holds the query, in every session of the caller's home or
// space at one agent or model (or in one session).
//
// The index, the scan and the reply's frames are package search's
// (search/over.go, its pace search/pace.go); this file is the engine's
// glue: which sessions a search reads, the caller's quota, and the
// sessions' logs opened as a reader would.

// searchStore is where the engine keeps search indexes: in its store,
// their directories made as the engine makes its own.
func (e *Engine) searchStore() *search.Store {
	return &search.Store{Root: e.root, MkdirAll: func(rel string, own storefs.Owner) error { return layout.MkdirAll(e.root, rel, own) }}
}

// searchIndexDir is the index of a container: <home>/.search/agent/<agent>
// or <home>/.search/model/<provider>/<model>.
func searchIndexDir(ct layout.Container) string {
	return path.Join(ct.Home, layout.SearchDir, ct.Kind, ct.Owner)
}

// search answers op search: the match frames as the sessions are scanned,
// then one searched frame. Refusals (a session named that does not exist,
// a caller with all the searches one uid may have under way) come before
// any frame. The search works in a goroutine of its own, at its pace
// (search.Pace), and stops once the reply is closed.
func (e *Engine) search(c layout.Caller, loc *location, req *proto.Request) (*Reply, error) {
	names, err := e.searchSessions(loc.ref, req.SessionGiven)
	if err != nil {
		return nil, err
	}
	if err := e.limits.Searches.Take(c.Uid); err != nil {
		return nil, err
	}
	frames := make(chan *proto.Object, searchFrameRoom)
	cancel := e.limits.ScanSlots.Start(func(ctx context.Context) {
		defer e.limits.Searches.Give(c.Uid)
		defer close(frames)
		pace := &search.Pace{Ctx: ctx, Slots: e.limits.ScanSlots, Limit: e.limits.ScanBytes}
		defer pace.Pause()
		ct := loc.ref.Container
		over := &search.Over{
			Store: e.searchStore(), IndexDir: searchIndexDir(ct), Names: names, All: !req.SessionGiven,
			Query: search.NewQuery(req.Query),
			Open:  func(name string) (*search.Log, error) { return e.openSearchLog(layout.Ref{Container: ct, Name: name}) },
			Warn:  func(err error) { e.cfg.Log.Warn("search: index unusable; searching without it", "err", err) },
		}
		over.Frames(pace, frames)
	})
	return reply.FromChannel(frames, cancel), nil
}

// searchFrameRoom is how many frames a search gets ahead of its reader
// before it waits (without its scan slot).
const searchFrameRoom = 64

// searchSessions lists the sessions to search: the one named, or all of
// the container's, most recently updated first (as index/list), so that
// the bound on matches keeps the newest.
func (e *Engine) searchSessions(r layout.Ref, one bool) ([]string, error) {
	if one {
		if !e.isDir(r.Rel()) {
			return nil, notFound("search", r.Name)
		}
		return []string{r.Name}, nil
	}
	var dirs []string
	for _, name := range layout.Subdirs(e.root, r.Container.Rel()) {
		if abi.ValidSessionName(name) {
			dirs = append(dirs, name)
		}
	}
	var order []string
	if x, err := e.Index(r.Container); err == nil && len(dirs) > 0 {
		order = x.List()
	}
	return listedFirst(dirs, order), nil
}

// listedFirst orders names as order has them, then the rest sorted.
func listedFirst(names, order []string) []string {
	have := map[string]bool{}
	for _, n := range names {
		have[n] = true
	}
	out := make([]string, 0, len(names))
	for _, n := range order {
		if have[n] {
			out = append(out, n)
			delete(have, n)
		}
	}
	var rest []string
	for n := range have {
		rest = append(rest, n)
	}
	sort.Strings(rest)
	return append(out, rest...)
}

// openSearchLog opens a session's messages.jsonl for reading, as a reader
// through the mount would: a search is a read, and reading works even
// when the history is unprovable. Sessions are not loaded for it (that
// verifies whole logs and holds descriptors); when one is loaded, only its
// committed length is read, never an append still in flight.
func (e *Engine) openSearchLog(r layout.Ref) (*search.Log, error) {
	f, err := e.root.OpenFile(r.Rel()+"/"+abi.FileMessages, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	lg := &search.Log{F: f, Size: st.Size()}
	if s, ok := e.sessions.Peek(r.Key()); ok && s.msgs != nil {
		lg.Size = min(lg.Size, s.msgs.Size())
	}
	if id, problem := layout.ReadIdentity(e.root, r.Rel()); problem == "" {
		hex.Decode(lg.Ident[:], id[:32])
	}
	return lg, nil
}
