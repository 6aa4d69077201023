package session

import (
	"context"
	"encoding/hex"
	"errors"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strconv"
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
// The index (package search) is derived data: per session, in
// <home>/.search/<kind>/<owner>/<session>/, numbered segment files 0, 1, …
// each the Bloom filter of the n-grams of one range of messages.jsonl.
// Closed segments are never rewritten; only the last one grows, so a query
// after an append re-reads only the bytes appended since, and rewrites one
// file of at most 512 KiB. Nothing hooks the send path: the index catches
// up at query time. Files are root's (0700/0600, like .self_id), replaced
// atomically without a sync: after a crash a segment is whole or missing,
// and one that no longer fits its log is dropped and rebuilt.

// maxMatches bounds a search's reply; the final frame says when more
// matches were cut.
const maxMatches = 1000

// searchOwner owns the index: the server's own, never the user's.
var searchOwner = storefs.Owner{Uid: 0, Gid: 0, DirMode: 0o700, FileMode: 0o600}

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
		e.dropStaleIndexes(ct, names)
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
	spans []span
	err   error // the session could not be searched
}

type span struct{ from, to int64 }

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
	defer lg.f.Close()
	ix := &sessionIndex{e: e, dir: searchIndexDir(ct) + "/" + name, log: lg, keys: q.Keys(), warn: warn, pace: pace}
	if err := ix.update(); pace.stopped(err) {
		c.err = err
		return c
	} else if err != nil {
		warn(err)
		ix.spans = []span{{0, lg.size}}
	}
	c.spans = mergeSpans(ix.spans)
	return c
}

// mergeSpans joins adjacent ranges, so that one scan reads them.
func mergeSpans(in []span) []span {
	var out []span
	for _, s := range in {
		if n := len(out); n > 0 && out[n-1].to == s.from {
			out[n-1].to = s.to
			continue
		}
		out = append(out, s)
	}
	return out
}

// searchLog is one session's messages.jsonl opened for searching.
type searchLog struct {
	f     *os.File
	r     io.ReaderAt // f read at the search's pace, counted: how indexing and verifying read it (a segment's check of the 64 bytes it ends with reads f)
	size  int64       // how much of it to read
	ident [16]byte    // the session's identity (zero when unreadable)
}

// openSearchLog opens a session's messages.jsonl for reading, as a reader
// through the mount would: a search is a read, and reading works even
// when the history is unprovable. Sessions are not loaded for it (that
// verifies whole logs and holds descriptors); when one is loaded, only its
// committed length is read, never an append still in flight.
func (e *Engine) openSearchLog(r layout.Ref, pace *searchPace) (*searchLog, error) {
	f, err := e.root.OpenFile(r.Rel()+"/"+abi.FileMessages, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	lg := &searchLog{f: f, r: pace.reader(f), size: st.Size()}
	if s, ok := e.sessions.peek(r.Key()); ok && s.msgs != nil {
		lg.size = min(lg.size, s.msgs.Size())
	}
	if id, problem := layout.ReadIdentity(e.root, r.Rel()); problem == "" {
		hex.Decode(lg.ident[:], id[:32])
	}
	return lg, nil
}

// searchLocks serialise index updates of one session (by its index
// directory's hash): two searches at once would build the same segments
// twice and could remove each other's.
var searchLocks [64]sync.Mutex

func searchLock(dir string) *sync.Mutex {
	h := fnv.New32a()
	h.Write([]byte(dir))
	return &searchLocks[h.Sum32()%uint32(len(searchLocks))]
}

// sessionIndex is one session's index while a query brings it up to date
// and asks it.
type sessionIndex struct {
	e     *Engine
	dir   string // store path of the session's segments
	log   *searchLog
	keys  []uint64
	warn  func(error)
	pace  *searchPace
	n     int    // closed segments kept on disk (0 … n-1); the last one is number n
	spans []span // ranges whose segment may hold the query
}

// update checks the segments on disk, probes them, extends the last one
// with what was appended since, and probes what it added. A segment that
// does not fit (unreadable, another log, the log cut) is dropped with all
// after it, and indexing goes on from the last one that fits. A segment
// that cannot be written is still probed from memory: the answer is
// right, and the index is fixed by a later query.
func (ix *sessionIndex) update() error {
	mu := searchLock(ix.dir)
	if !mu.TryLock() {
		// The search holding it may wait for the slot this one holds.
		ix.pace.pause()
		mu.Lock()
	}
	defer mu.Unlock()
	first := ix.load()
	if first == nil {
		return nil // up to date
	}
	from := first.End
	last, err := search.Extend(ix.log.r, first, ix.log.size, func(s *search.Segment) error {
		ix.probe(s)
		ix.write(s)
		ix.n++
		return nil
	})
	if err != nil {
		return err
	}
	ix.probe(last)
	if last.End > last.Start && (last != first || last.End != from) {
		ix.write(last)
	}
	return nil
}

// load checks and probes the segments on disk, reading only their
// headers and the blocks the query's keys fall in. It returns the
// segment to extend: the last one read whole when the log grew past it, a
// new one after the last that fits, or nil when nothing is left to index.
// ix.n is then the number of the segment returned.
func (ix *sessionIndex) load() *search.Segment {
	count := ix.list()
	var end int64
	for i := range count {
		f, h, ok := ix.open(i, end)
		if ok && i == count-1 && !h.Closed && h.End < ix.log.size {
			s := ix.decode(f)
			f.Close()
			if s != nil {
				ix.n = i
				return s
			}
			ok = false
		}
		if !ok {
			ix.drop(i, count)
			return ix.fresh(end)
		}
		ix.probeFile(f, h)
		f.Close()
		end = h.End
		if i == count-1 && !h.Closed {
			ix.n = i // the last one, still open, and nothing to add to it
			return nil
		}
	}
	ix.n = count
	return ix.fresh(end)
}

// fresh is a new segment from end, nil when the log has nothing after it.
func (ix *sessionIndex) fresh(end int64) *search.Segment {
	if end >= ix.log.size {
		return nil
	}
	return search.NewSegment(ix.log.ident, end)
}

// list counts the segments 0 … n-1 in the directory and removes what
// else is there (segments after a gap, leftovers of a replace a crash
// interrupted: nothing else writes here while the lock is held).
func (ix *sessionIndex) list() int {
	ents, err := ix.e.root.ReadDir(ix.dir)
	if err != nil {
		return 0
	}
	have := map[int]bool{}
	for _, ent := range ents {
		if i, ok := segmentNumber(ent.Name); ok {
			have[i] = true
		}
	}
	n := 0
	for have[n] {
		n++
	}
	for _, ent := range ents {
		if i, ok := segmentNumber(ent.Name); !ok || i >= n {
			ix.e.root.RemoveAll(ix.dir + "/" + ent.Name)
		}
	}
	return n
}

// segmentNumber reads a segment file's name: a decimal number as
// strconv.Itoa writes it.
func segmentNumber(name string) (int, bool) {
	i, err := strconv.Atoi(name)
	return i, err == nil && i >= 0 && strconv.Itoa(i) == name
}

// open opens segment i and checks its header against the log: it must
// start at start, belong to this session and end where the log has the
// bytes it ended with.
func (ix *sessionIndex) open(i int, start int64) (*os.File, search.Header, bool) {
	var h search.Header
	f, err := ix.e.root.OpenFile(ix.dir+"/"+strconv.Itoa(i), os.O_RDONLY, 0)
	if err != nil {
		return nil, h, false
	}
	st, err := f.Stat()
	b := make([]byte, search.HeaderSize)
	if err == nil {
		_, err = f.ReadAt(b, 0)
	}
	if err == nil {
		h, err = search.ParseHeader(b, st.Size())
	}
	if err != nil || h.Start != start || !h.Fits(ix.log.f, ix.log.ident, ix.log.size) || !checkedOnce(f, st) {
		f.Close()
		return nil, h, false
	}
	return f, h, true
}

// checkedOnce checks a segment file's bits (their checksum) the first time
// this server sees that version of the file: probes read only a few
// blocks, and a flipped bit could hide a match. Index files are replaced,
// never rewritten in place, so a version is its inode and times.
func checkedOnce(f *os.File, st os.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	v := fileVersion{sys.Dev, sys.Ino, sys.Size, sys.Mtim.Nano(), sys.Ctim.Nano()}
	segmentChecks.Lock()
	done := segmentChecks.m[v]
	segmentChecks.Unlock()
	if done {
		return true
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		return false
	}
	if _, err := search.DecodeSegment(b); err != nil {
		return false
	}
	segmentChecks.Lock()
	if segmentChecks.m == nil || len(segmentChecks.m) > 1<<20 {
		segmentChecks.m = map[fileVersion]bool{} // bounded: forgetting costs one more check
	}
	segmentChecks.m[v] = true
	segmentChecks.Unlock()
	return true
}

type fileVersion struct {
	dev, ino           uint64
	size, mtime, ctime int64
}

var segmentChecks struct {
	sync.Mutex
	m map[fileVersion]bool
}

// decode reads a segment whole (its bits checked); nil when it cannot.
func (ix *sessionIndex) decode(f *os.File) *search.Segment {
	b, err := io.ReadAll(io.LimitReader(f, search.MaxFileSize+1))
	if err != nil {
		return nil
	}
	s, err := search.DecodeSegment(b)
	if err != nil {
		return nil
	}
	return s
}

// probeFile notes a stored segment's range when its filter may hold the
// query; one that cannot be read is scanned rather than trusted.
func (ix *sessionIndex) probeFile(f *os.File, h search.Header) {
	if has, err := h.Probe(f, ix.keys); has || err != nil {
		ix.spans = append(ix.spans, span{h.Start, h.End})
	}
}

// drop removes segments from … to-1, which no longer fit; the next
// segment written is number from.
func (ix *sessionIndex) drop(from, to int) {
	ix.n = from
	for i := from; i < to; i++ {
		ix.e.root.Remove(ix.dir + "/" + strconv.Itoa(i))
	}
}

// probe notes s's range when its filter may hold the query.
func (ix *sessionIndex) probe(s *search.Segment) {
	if s.End > s.Start && s.HasAll(ix.keys) {
		ix.spans = append(ix.spans, span{s.Start, s.End})
	}
}

// write stores s as segment number ix.n.
func (ix *sessionIndex) write(s *search.Segment) {
	err := ix.e.mkdirAll(ix.dir, searchOwner)
	if err == nil {
		err = ix.e.root.ReplaceFile(ix.dir+"/"+strconv.Itoa(ix.n), s.Encode(), searchOwner, storefs.NoSync)
	}
	if err != nil {
		ix.warn(err)
	}
}

// dropStaleIndexes removes the index directories of sessions that are no
// longer in the container (archived, deleted).
func (e *Engine) dropStaleIndexes(ct layout.Container, names []string) {
	dir := searchIndexDir(ct)
	ents, err := e.root.ReadDir(dir)
	if err != nil {
		return
	}
	live := map[string]bool{}
	for _, n := range names {
		live[n] = true
	}
	for _, ent := range ents {
		if !live[ent.Name] {
			mu := searchLock(dir + "/" + ent.Name)
			mu.Lock()
			e.root.RemoveAll(dir + "/" + ent.Name)
			mu.Unlock()
		}
	}
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
	defer lg.f.Close()
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
func (o *searchOut) scanSpan(lg *searchLog, name string, sp span, q *search.Query) (ok bool, err error) {
	to := min(sp.to, lg.size)
	_, err = search.EachLine(lg.r, sp.from, to, func(line []byte, _ int64) error {
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
