package session

import (
	"context"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"sync"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/search"
	"github.com/ctxfs/ctxfs/session/layout"
)

// Full-text search (SPEC 14): op search finds the messages whose user or
// assistant text holds the query, in every session of the caller's home or
// space at one agent or model (or in one session).
//
// The index and its segment files are package search's (search/store.go);
// this file is the engine's glue: which sessions a search reads, the
// caller's quota and the search's pace, the sessions' logs opened as a
// reader would, and the reply's frames.

// maxMatches bounds a search's reply; the final frame says when more
// matches were cut.
const maxMatches = 1000

// searchStore is where the engine keeps search indexes: in its store,
// their directories made as the engine makes its own.
func (e *Engine) searchStore() *search.Store {
	return &search.Store{Root: e.root, MkdirAll: e.mkdirAll}
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
// (searchpace.go), and stops once the reply is closed.
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
		pace := &searchPace{ctx: ctx, gate: e.limits.ScanSlots, limit: e.limits.ScanBytes}
		defer pace.pause()
		e.searchFrames(loc.ref.Container, names, search.NewQuery(req.Query), !req.SessionGiven, pace, frames)
	})
	return channelReply(frames, cancel), nil
}

// searchFrameRoom is how many frames a search gets ahead of its reader
// before it waits (without its scan slot).
const searchFrameRoom = 64

// channelReply is the reply whose frames come through frames, until it
// is closed; stop is called when the reader leaves.
func channelReply(frames <-chan *proto.Object, stop func()) *Reply {
	return &Reply{
		next: func(ctx context.Context) (*proto.Object, error) {
			select {
			case f, ok := <-frames:
				if !ok {
					return nil, io.EOF
				}
				return f, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
		poll: func() (*proto.Object, error) {
			select {
			case f, ok := <-frames:
				if !ok {
					return nil, io.EOF
				}
				return f, nil
			default:
				return nil, nil
			}
		},
		stop: stop,
	}
}

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

// searchFrames writes the reply of a search to frames, one session after
// the other: its index brought up to date, then its candidate ranges
// scanned, each match sent as it is found. all says names are every
// session of the container: index directories of other names are then
// left over from sessions archived or deleted, and go.
func (e *Engine) searchFrames(ct layout.Container, names []string, q *search.Query, all bool, pace *searchPace, frames chan<- *proto.Object) {
	if all {
		e.searchStore().DropStale(searchIndexDir(ct), names)
	}
	out := &searchOut{send: func(f *proto.Object) bool { return pace.send(frames, f) }, pace: pace}
	warn := e.onceWarner()
	for _, name := range names {
		if pace.work() != nil {
			break
		}
		c := e.candidate(ct, name, q, pace, warn)
		if pace.stopped(c.err) || !out.scan(e, ct, c, q) {
			break
		}
	}
	if pace.ctx.Err() != nil {
		return
	}
	if pace.cut {
		out.limit = "scan"
	}
	end := proto.NewObject("type", proto.FrameSearched, "sessions", len(names),
		"matches", out.n, "scanned", pace.read, "truncated", out.limit != "")
	if out.limit != "" {
		end.Set("limit", out.limit)
	}
	out.send(end)
}

// searchOut is a search's reply as it is written.
type searchOut struct {
	send  func(*proto.Object) bool // false: the reader left
	pace  *searchPace
	n     int    // matches sent
	limit string // the bound that cut the reply: "matches" (maxMatches) or "scan" (Limits.ScanBytes)
}

// emit sends f; false when the reply must end (the reader left, or the
// bound was passed).
func (o *searchOut) emit(f *proto.Object) bool {
	if f.Str("type") == proto.FrameMatch {
		if o.n == maxMatches {
			o.limit = "matches"
			return false
		}
		o.n++
	}
	return o.send(f)
}

// candidate is one session after the index looked: the ranges of its
// messages.jsonl that may hold a match.
type candidate struct {
	name  string
	spans []search.Span
	err   error // the session could not be searched
}

// onceWarner reports the first index problem of a search in the
// server's log: the search goes on without the index where it failed (it
// scans those sessions whole), and one line says why.
func (e *Engine) onceWarner() func(error) {
	var once sync.Once
	return func(err error) {
		once.Do(func() { e.cfg.Log.Warn("search: index unusable; searching without it", "err", err) })
	}
}

// candidate opens one session's log and asks its index. A session that
// vanished meanwhile has nothing to find.
func (e *Engine) candidate(ct layout.Container, name string, q *search.Query, pace *searchPace, warn func(error)) candidate {
	c := candidate{name: name}
	lg, err := e.openSearchLog(layout.Ref{Container: ct, Name: name}, pace)
	if errors.Is(err, fs.ErrNotExist) {
		return c
	}
	if err != nil {
		c.err = err
		return c
	}
	defer lg.F.Close()
	spans, err := e.searchStore().Candidates(searchIndexDir(ct)+"/"+name, lg, q.Keys(), pace.pause, warn)
	if pace.stopped(err) {
		c.err = err
		return c
	} else if err != nil {
		warn(err)
		spans = []search.Span{{From: 0, To: lg.Size}}
	}
	c.spans = search.MergeSpans(spans)
	return c
}

// openSearchLog opens a session's messages.jsonl for reading, as a reader
// through the mount would: a search is a read, and reading works even
// when the history is unprovable. Sessions are not loaded for it (that
// verifies whole logs and holds descriptors); when one is loaded, only its
// committed length is read, never an append still in flight.
func (e *Engine) openSearchLog(r layout.Ref, pace *searchPace) (*search.Log, error) {
	f, err := e.root.OpenFile(r.Rel()+"/"+abi.FileMessages, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	lg := &search.Log{F: f, R: pace.reader(f), Size: st.Size()}
	if s, ok := e.sessions.peek(r.Key()); ok && s.msgs != nil {
		lg.Size = min(lg.Size, s.msgs.Size())
	}
	if id, problem := layout.ReadIdentity(e.root, r.Rel()); problem == "" {
		hex.Decode(lg.Ident[:], id[:32])
	}
	return lg, nil
}

// scan verifies one candidate: it reads its ranges line by line (never the
// whole log at once) and sends a match frame for each message that holds
// the query. False when the reply must end.
func (o *searchOut) scan(e *Engine, ct layout.Container, c candidate, q *search.Query) bool {
	if c.err != nil {
		return o.emit(withSession(proto.ErrorFrame(c.err), c.name))
	}
	if len(c.spans) == 0 {
		return true
	}
	lg, err := e.openSearchLog(layout.Ref{Container: ct, Name: c.name}, o.pace)
	if err != nil {
		return errors.Is(err, fs.ErrNotExist) || o.emit(withSession(proto.ErrorFrame(err), c.name))
	}
	defer lg.F.Close()
	for _, sp := range c.spans {
		ok, err := o.scanSpan(lg, c.name, sp, q)
		if !ok {
			return false
		}
		if err != nil {
			return o.emit(withSession(proto.ErrorFrame(err), c.name))
		}
	}
	return true
}

// errStop ends a scan early.
var errStop = errors.New("stop")

// scanSpan sends the matches in one range of the log; ok is false when
// the reply must end (the reader left, a bound was reached).
func (o *searchOut) scanSpan(lg *search.Log, name string, sp search.Span, q *search.Query) (ok bool, err error) {
	to := min(sp.To, lg.Size)
	_, err = search.EachLine(lg.R, sp.From, to, func(line []byte, _ int64) error {
		if !q.MayHold(line) {
			return nil
		}
		m, isMsg := search.ParseMessage(line)
		if !isMsg {
			return nil
		}
		start, end, found := q.Find(m.Text)
		if found && !o.emit(proto.NewObject("type", proto.FrameMatch, "session", name, "run", m.Run,
			"role", m.Role, "ts", m.TS, "text", search.Snippet(m.Text, start, end, search.SnippetBytes))) {
			return errStop
		}
		return nil
	})
	switch {
	case err == errStop || o.pace.stopped(err):
		return false, nil
	case err != nil:
		return true, &abi.Error{Op: "search", Path: name, Errno: syscall.EIO, Msg: "reading messages.jsonl: " + storefs.Words(err)}
	}
	return true, nil
}

func withSession(f *proto.Object, name string) *proto.Object {
	f.Set("session", name)
	return f
}
