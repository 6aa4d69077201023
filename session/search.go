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
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/search"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/quota"
	"github.com/ctxfs/ctxfs/session/reply"
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
// (its searchPace, below), and stops once the reply is closed.
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

// Searches are paced (issue 19, finding 9): one uid's parallel searches of
// a large session took the CPU every other user's sends needed. Three
// bounds, in quota.Limits (session/quota/gate.go):
//
//   - a uid has at most SearchesPerUid searches under way (2): more are
//     refused EAGAIN at once, before anything is read;
//   - at most ScanSlots searches work at once server-wide (half the CPUs,
//     at least one), so the rest of the machine is left to everything
//     else; the others wait their turn. A search gives its slot back every
//     scanSlice of work and whenever it waits for its reader, so a slow
//     reader or a huge session delays the others by one slice, not by a
//     search; the waiting are bounded by the Searches quota's total;
//   - a search reads at most ScanBytes of messages.jsonl, to index or to
//     verify: beyond, its reply ends with the searched frame's "truncated"
//     true and "limit" "scan" (ctx says EFBIG). What it indexed stays, so
//     the next search goes further.
//
// A search works in a goroutine of its own that stops at its next read
// once its reply is closed (the reader left).

// scanSlice is how long a search works before it lets the searches
// waiting for a slot go first.
const scanSlice = 5 * time.Millisecond

// errScanBound ends a search that read all it may.
var errScanBound = errors.New("the search read as much as one search may")

// searchPace is one search's share of the server: its scan slot while it
// works, and the bytes it read. Used by the search's own goroutine only.
type searchPace struct {
	ctx   context.Context // done when the reply is closed
	gate  *quota.ScanGate
	limit int64 // bytes it may read
	read  int64 // bytes of messages.jsonl read so far
	cut   bool  // limit was reached
	held  bool
	since time.Time // when the slot was taken
}

// work is called before each piece of work: it fails once the reader
// left, and holds a slot for the work, waiting for one when none is held
// or when the one held was held for a slice.
func (p *searchPace) work() error {
	if err := p.ctx.Err(); err != nil {
		return err
	}
	if p.held && time.Since(p.since) >= scanSlice {
		p.pause()
	}
	if !p.held {
		if err := p.gate.Take(p.ctx); err != nil {
			return err
		}
		p.held, p.since = true, time.Now()
	}
	return nil
}

// pause gives the slot back: the search waits (for its reader) or ended.
func (p *searchPace) pause() {
	if p.held {
		p.gate.Give()
		p.held = false
	}
}

// charge counts n bytes about to be read, or refuses them: a search that
// would pass its bound reads nothing more.
func (p *searchPace) charge(n int) error {
	if p.read+int64(n) > p.limit {
		p.cut = true
		return errScanBound
	}
	p.read += int64(n)
	return nil
}

// stopped reports whether err ended the search (its reader left, or its
// bound was reached) rather than failing one session.
func (p *searchPace) stopped(err error) bool {
	return errors.Is(err, errScanBound) || p.ctx.Err() != nil && errors.Is(err, p.ctx.Err())
}

// send hands f to the reply's reader: without waiting when there is room,
// else with the slot given back meanwhile. False when the reader left.
func (p *searchPace) send(out chan<- *proto.Object, f *proto.Object) bool {
	select {
	case out <- f:
		return true
	default:
	}
	p.pause()
	select {
	case out <- f:
		return true
	case <-p.ctx.Done():
		return false
	}
}

// reader is log read at the search's pace: each read is work, and counts.
func (p *searchPace) reader(log io.ReaderAt) io.ReaderAt { return pacedReader{p, log} }

type pacedReader struct {
	p   *searchPace
	log io.ReaderAt
}

func (r pacedReader) ReadAt(b []byte, off int64) (int, error) {
	if err := r.p.work(); err != nil {
		return 0, err
	}
	if err := r.p.charge(len(b)); err != nil {
		return 0, err
	}
	return r.log.ReadAt(b, off)
}
