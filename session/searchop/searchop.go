// Package searchop owns the engine's side of op search (SPEC 14): which
// sessions a search reads (the one named, or all of the container's,
// newest first), the caller's search quota and the scan slot it works
// in, and the sessions' logs opened as a reader through the mount would
// open them (never past what a loaded session has committed).
//
// The index, the scan and the reply's frames are package search's
// (search/over.go, its pace search/pace.go). searchop must never load a
// session, write a session's files, or import the engine, fs, server or
// cmd: what only the engine knows (a container's list order, a loaded
// session's committed length) it asks through Op's functions.
package searchop

import (
	"context"
	"encoding/hex"
	"log/slog"
	"os"
	"path"
	"sort"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/search"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/reply"
)

// Op is one store's searches, as the engine hands it out.
type Op struct {
	Root   *storefs.Root // the store, its errors naming paths under the mount
	Limits *quota.Limits // the searches per uid, the scan slots and bytes
	Log    *slog.Logger
	// Order is a container's sessions as its index lists them (most
	// recently updated first), nil when it has no index.
	Order func(ct layout.Container) []string
	// Committed is, for the sessions of a container by name, the length
	// of messages.jsonl a loaded session has committed (ok false when the
	// session is not loaded).
	Committed func(ct layout.Container) func(name string) (size int64, ok bool)
}

// store is where the engine keeps search indexes: in its store,
// their directories made as the engine makes its own.
func (o *Op) store() *search.Store {
	return &search.Store{Root: o.Root, MkdirAll: func(rel string, own storefs.Owner) error { return layout.MkdirAll(o.Root, rel, own) }}
}

// DropIndex removes the search index of the session r, gone from its
// place (archived, deleted).
func DropIndex(root *storefs.Root, r layout.Ref) {
	(&Op{Root: root}).store().Drop(indexDir(r.Container), r.Name)
}

// indexDir is the index of a container: <home>/.search/agent/<agent>
// or <home>/.search/model/<provider>/<model>.
func indexDir(ct layout.Container) string {
	return path.Join(ct.Home, layout.SearchDir, ct.Kind, ct.Owner)
}

// Search answers op search of uid in the session or container r (the
// session when req names one): the match frames as the sessions are
// scanned, then one searched frame. Refusals (a session named that does
// not exist, a caller with all the searches one uid may have under way)
// come before any frame. The search works in a goroutine of its own, at
// its pace (search.Pace), and stops once the reply is closed.
func (o *Op) Search(uid uint32, r layout.Ref, req *proto.Request) (*reply.Reply, error) {
	if req.SessionGiven && !layout.IsDir(o.Root, r.Rel()) {
		return nil, &abi.Error{Op: "search", Path: r.Name, Errno: syscall.ENOENT, Msg: "no such session"}
	}
	if err := o.Limits.Searches.Take(uid); err != nil {
		return nil, err
	}
	frames := make(chan *proto.Object, FrameRoom)
	cancel := o.Limits.ScanSlots.Start(func(ctx context.Context) {
		defer o.Limits.Searches.Give(uid)
		defer close(frames)
		pace := &search.Pace{Ctx: ctx, Slots: o.Limits.ScanSlots, Limit: o.Limits.ScanBytes}
		defer pace.Pause()
		ct := r.Container
		over := &search.Over{
			Store: o.store(), Dir: ct.Rel(), IndexDir: indexDir(ct),
			Query:     search.NewQuery(req.Query),
			Open:      func(name string) (*search.Log, error) { return o.openLog(layout.Ref{Container: ct, Name: name}) },
			Committed: o.Committed(ct),
			Warn:      func(err error) { o.Log.Warn("search: index unusable; searching without it", "err", err) },
		}
		if req.SessionGiven {
			over.Names = []string{r.Name}
		} else {
			over.List = func() []string { return o.sessions(ct) }
			over.Arrange = func(names []string) []string { return listedFirst(names, o.Order(ct)) }
		}
		over.Frames(pace, frames)
	})
	return reply.FromChannel(frames, cancel), nil
}

// FrameRoom is how many frames a search gets ahead of its reader
// before it waits (without its scan slot).
const FrameRoom = 64

// sessions lists the container's sessions (the names of its session
// directories). A search of them all reads them in listedFirst's order,
// most recently updated first (as index/list), so that the bound on
// matches keeps the newest.
func (o *Op) sessions(ct layout.Container) []string {
	var dirs []string
	for _, name := range layout.Subdirs(o.Root, ct.Rel()) {
		if abi.ValidSessionName(name) {
			dirs = append(dirs, name)
		}
	}
	return dirs
}

// listedFirst orders names as order has them, then the rest sorted.
func listedFirst(names, order []string) []string {
	have := make(map[string]bool, len(names))
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

// openLog opens a session's messages.jsonl for reading, as a reader
// through the mount would: a search is a read, and reading works even
// when the history is unprovable. Sessions are not loaded for it (that
// verifies whole logs and holds descriptors); when one is loaded, only its
// committed length is read, never an append still in flight.
func (o *Op) openLog(r layout.Ref) (*search.Log, error) {
	f, err := o.Root.OpenFile(r.Rel()+"/"+abi.FileMessages, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	lg := &search.Log{F: f, Size: st.Size(), Info: st}
	if size, ok := o.Committed(r.Container)(r.Name); ok {
		lg.Size = min(lg.Size, size)
	}
	lg.Ident = o.identity(r.Rel(), st)
	return lg, nil
}

// identity is the identity of the session at rel whose log is the file
// st describes (zero when unreadable). It is read once for each version
// of the log: a session's identity file is written with its logs when it
// is made and never after, so the same log file at the same place is
// the same session (a session made again at that place has a new log).
func (o *Op) identity(rel string, log os.FileInfo) (ident [16]byte) {
	v, known := search.VersionOf(log)
	key := identityKey{rel, v}
	if known {
		if id, ok := identities.Get(key); ok {
			return id
		}
	}
	id, problem := layout.ReadIdentity(o.Root, rel)
	if problem != "" {
		return ident // not remembered: a later search reads it again
	}
	hex.Decode(ident[:], id[:32])
	if known {
		identities.Put(key, ident)
	}
	return ident
}

type identityKey struct {
	rel string
	log search.FileVersion
}

// identities are the identities read, by session place and log version.
var identities search.Memory[identityKey, [16]byte]
