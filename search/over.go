package search

import (
	"errors"
	"io/fs"
	"sync"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/proto"
)

// MaxMatches bounds a search's reply; the final frame says when more
// matches were cut.
const MaxMatches = 1000

// Over is one search (SPEC 14) over sessions of one container: which
// sessions, where their indexes are, and how their logs are opened. The
// engine chooses the sessions and opens their logs (as a reader through
// the mount would); this package indexes, scans and writes the reply.
type Over struct {
	Store    *Store
	Dir      string   // the container's session directory: one per session under it
	IndexDir string   // the container's index directory: one per session under it
	Names    []string // the sessions, in the order their matches come (when List is nil)
	// List, when set, lists every session of the container (the names in
	// its session directory, remembered while that directory does not
	// change), and Arrange puts them in the order their matches come.
	// Index directories of other names are then left over from sessions
	// archived or deleted, and go.
	List    func() []string
	Arrange func([]string) []string
	Query   *Query
	// Open opens a session's messages.jsonl; fs.ErrNotExist when the
	// session went meanwhile (it then has nothing to find). Log.R is set
	// here, to Log.F read at the search's pace.
	Open func(name string) (*Log, error)
	// Committed is the length of messages.jsonl a loaded session has
	// committed (ok false when it is not loaded): what Open would read.
	Committed func(name string) (size int64, ok bool)
	// Warn reports an index problem in the server's log (once a search).
	Warn func(error)
}

// Frames writes the reply of the search to frames, one session after the
// other: its index brought up to date, then its candidate ranges scanned,
// each match sent as it is found, then one searched frame.
func (s *Over) Frames(pace *Pace, frames chan<- *proto.Object) {
	var view *warmView
	if s.Dir != "" {
		view = warmBegin(s.Store.Root, s.Dir, s.IndexDir)
	}
	names := s.Names
	if s.List != nil {
		listed := view.list(s.List)
		view.tidy(func() { s.Store.DropStale(s.IndexDir, listed) })
		names = s.Arrange(listed)
	}
	out := &searchOut{send: func(f *proto.Object) bool { return pace.send(frames, f) }, pace: pace}
	warn := onceOnly(s.Warn)
	for _, name := range names {
		if pace.work() != nil {
			break
		}
		c, known := s.remembered(view, name, pace)
		if !known {
			c = s.candidate(view, name, pace, warn)
		}
		ok := !pace.stopped(c.err) && out.scan(c, s.Query)
		c.close()
		if !ok {
			break
		}
	}
	if pace.Ctx.Err() != nil {
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

// onceOnly calls warn for the first error only: the search goes on
// without the index where it failed (it scans those sessions whole), and
// one line says why.
func onceOnly(warn func(error)) func(error) {
	var once sync.Once
	return func(err error) { once.Do(func() { warn(err) }) }
}

// open opens a session's log, read at pace.
func (s *Over) open(name string, pace *Pace) (*Log, error) {
	lg, err := s.Open(name)
	if err != nil {
		return nil, err
	}
	lg.R = pace.reader(lg.F)
	return lg, nil
}

// searchOut is a search's reply as it is written.
type searchOut struct {
	send  func(*proto.Object) bool // false: the reader left
	pace  *Pace
	n     int    // matches sent
	limit string // the bound that cut the reply: "matches" (MaxMatches) or "scan" (Pace.Limit)
}

// emit sends f; false when the reply must end (the reader left, or the
// bound was passed).
func (o *searchOut) emit(f *proto.Object) bool {
	if f.Str("type") == proto.FrameMatch {
		if o.n == MaxMatches {
			o.limit = "matches"
			return false
		}
		o.n++
	}
	return o.send(f)
}

// candidate is one session after the index looked: the ranges of its
// messages.jsonl that may hold a match, and the log open to scan them.
type candidate struct {
	name  string
	log   *Log // nil when the session vanished or failed
	spans []Span
	err   error // the session could not be searched
}

func (c candidate) close() {
	if c.log != nil {
		c.log.F.Close()
	}
}

// remembered answers for one session from what an earlier query found
// (warm.go), without opening its index; its log is opened only when a
// range may hold the query, and must be the file remembered. ok is false
// when the session must be checked.
func (s *Over) remembered(view *warmView, name string, pace *Pace) (c candidate, ok bool) {
	if view == nil || s.Committed == nil {
		return c, false
	}
	committed, loaded := s.Committed(name)
	spans, id, read, ok := view.lookup(name, s.Query.Keys(), committed, loaded)
	if !ok {
		return c, false
	}
	c = candidate{name: name, spans: MergeSpans(spans)}
	if len(spans) == 0 {
		return c, true
	}
	lg, err := s.open(name, pace)
	if errors.Is(err, fs.ErrNotExist) {
		return candidate{name: name}, true
	}
	if err != nil {
		c.err = err
		return c, true
	}
	if v, known := VersionOf(lg.Info); !known || (fileID{v.dev, v.ino}) != id || lg.Size < read {
		lg.F.Close()
		return c, false
	}
	lg.Size = read
	c.log = lg
	return c, true
}

// candidate opens one session's log and asks its index. A session that
// vanished meanwhile has nothing to find.
func (s *Over) candidate(view *warmView, name string, pace *Pace, warn func(error)) candidate {
	c := candidate{name: name}
	var check *warmCheck
	if view != nil {
		check = view.check(s.Store.Root, s.Dir+"/"+name, s.IndexDir+"/"+name, name)
	}
	lg, err := s.open(name, pace)
	if errors.Is(err, fs.ErrNotExist) {
		return c
	}
	if err != nil {
		c.err = err
		return c
	}
	c.log = lg
	if check != nil {
		check.watchLog(lg)
	}
	spans, err := s.Store.Candidates(s.IndexDir+"/"+name, lg, s.Query.Keys(), pace.Pause, warn, check)
	if pace.stopped(err) {
		c.err = err
		return c
	} else if err != nil {
		warn(err)
		spans = []Span{{From: 0, To: lg.Size}}
	}
	c.spans = MergeSpans(spans)
	return c
}

// scan verifies one candidate: it reads its ranges line by line (never the
// whole log at once) and sends a match frame for each message that holds
// the query. False when the reply must end.
func (o *searchOut) scan(c candidate, q *Query) bool {
	if c.err != nil {
		return o.emit(withSession(proto.ErrorFrame(c.err), c.name))
	}
	for _, sp := range c.spans {
		ok, err := o.scanSpan(c.log, c.name, sp, q)
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
func (o *searchOut) scanSpan(lg *Log, name string, sp Span, q *Query) (ok bool, err error) {
	to := min(sp.To, lg.Size)
	_, err = EachLineMay(lg.R, sp.From, to, q.MayHoldIn, func(line []byte, _ int64) error {
		if !q.MayHold(line) {
			return nil
		}
		m, isMsg := ParseMessage(line)
		if !isMsg {
			return nil
		}
		start, end, found := q.Find(m.Text)
		if found && !o.emit(proto.NewObject("type", proto.FrameMatch, "session", name, "run", Field(m.Run),
			"role", m.Role, "ts", Field(m.TS), "text", Snippet(m.Text, start, end, SnippetBytes))) {
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
