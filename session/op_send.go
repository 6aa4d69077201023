package session

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/internal/gopool"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/archivable"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/reply"
	"github.com/ctxfs/ctxfs/session/sealedlog"
)

// send carries out SPEC section 8 for a located request. It returns once
// the start frame is durable, or with the error that refused the request
// (and then nothing was written).
func (e *Engine) send(c layout.Caller, loc *location, req *proto.Request) (*Reply, error) {
	if req.Input == "" { // whatever the client: an empty message is never recorded
		return nil, abi.Errorf(syscall.EINVAL, "send", "the input is empty: nothing to send")
	}
	defn, err := e.definition(loc.ref.Container)
	if err == nil {
		defn, err = e.kids.Attenuate(req.Parent, defn) // a child's (SPEC 18)
	}
	if err != nil {
		return nil, err
	}
	cwd := effectiveCwd(req.Cwd, defn)
	if err := abi.CheckCwd(cwd); err != nil {
		return nil, err
	}
	// A new session is created, then sent to; a concurrent send that
	// failed its client id's claim makes this one look again. Both settle
	// in a few rounds; the bound only guards against a store that keeps
	// losing the directory under us.
	var ticket *runTicket // taken before a session is created for the run
	defer func() { ticket.cancel() }()
	for round := 0; round < 8; round++ {
		s, release, err := e.lookup(loc.ref)
		if err == nil {
			r, retry, err := e.sendTo(c, s, loc, req, defn, cwd, ticket)
			release() // a run started holds the session by itself (s.active)
			if retry {
				continue
			}
			return r, err
		}
		if !errors.Is(err, syscall.ENOENT) {
			return nil, err
		}
		// A new session: refuse lines the logs would refuse (a user
		// message over the line limit, a home whose history has no room
		// for them), a caller out of runs, a home without room for its
		// names, or a bad cwd, before creating anything (the cwd's check
		// makes the agent's root/ when the run can start in it). The
		// records are made again as the run starts, stamped then.
		if err := e.checkStartRecords(c, loc, req, cwd); err != nil {
			return nil, err
		}
		if err := e.admitTemp(c, loc, req); err != nil {
			return nil, err
		}
		if ticket == nil {
			if ticket, err = e.takeRun(c.Uid); err != nil {
				return nil, err
			}
		}
		held, err := e.roomFor(loc.ref, 1)
		if err != nil {
			return nil, err
		}
		if _, err = e.resolveCwd(c, loc, cwd); err == nil {
			err = e.create(loc.ref, loc.own, cwd, held)
		}
		held.give() // what create did not take: it found the session made
		if err != nil {
			return nil, err
		}
	}
	return nil, abi.Errorf(syscall.EIO, "send", "session %s keeps changing under the send", loc.ref.Name)
}

func effectiveCwd(reqCwd string, defn *def.Definition) string {
	switch {
	case reqCwd != "":
		return reqCwd
	case defn.Cwd != "":
		return defn.Cwd
	}
	return "/"
}

// startRecords are what a send records as its run starts (SPEC 8 step 7):
// the start event, the user message and the active state, as lines.
type startRecords struct {
	now    time.Time
	run    string
	start  *proto.Object // the start frame, also the reply's first
	events []byte        // the start and state lines, for events.jsonl
	msgs   []byte        // the user message line, for messages.jsonl
}

// newStartRecords makes a send's start records, with a new run id,
// stamped now. The logs judge their lines as they append them (EINVAL).
func newStartRecords(c layout.Caller, loc *location, req *proto.Request, cwd string) (*startRecords, error) {
	id, err := abi.NewRunID()
	if err != nil {
		return nil, &abi.Error{Op: "send", Errno: syscall.EIO, Msg: err.Error()}
	}
	now := time.Now()
	ts := abi.TS(now)
	start := proto.NewObject("type", proto.FrameStart, "id", id, "run", id, "client_id", req.ID,
		"session", loc.ref.Name, "scope", loc.scope, "cwd", cwd, "uid", c.Uid, "gid", c.Gid, "ts", ts)
	if loc.space != "" {
		start.Set("space", loc.space)
	}
	if req.Op == proto.OpRestore {
		start.Set("op", proto.OpRestore) // a restart resumes it as a restore (restartRun)
	}
	if req.Parent != "" {
		start.Set("parent", req.Parent)
		start.Set("parent_session", req.ParentSession)
	}
	user := proto.NewObject("role", "user", "run", id, "content", req.Input, "ts", ts)
	state := proto.NewObject("type", proto.FrameState, "state", abi.StateActive, "run", id, "ts", ts)
	return &startRecords{now: now, run: id, start: start,
		events: append(start.Line(), state.Line()...), msgs: user.Line()}, nil
}

// checkStartRecords judges the lines a send's start would append as the
// logs will, before a session is created for them: EINVAL for a user
// message over the line limit (a request may hold an input whose line,
// escaped and with its run and time stamp, does not fit), and EDQUOT for
// records past the home's bound on history. A run id and a time stamp are
// always as long, so the records made later judge the same.
func (e *Engine) checkStartRecords(c layout.Caller, loc *location, req *proto.Request, cwd string) error {
	r, err := newStartRecords(c, loc, req, cwd)
	if err != nil {
		return err
	}
	if err := sealedlog.Validate(r.events); err != nil {
		return err
	}
	if err := sealedlog.Validate(r.msgs); err != nil {
		return err
	}
	// The session's meta.json too, which its creation charges.
	return e.startRoom(loc, int64(len(r.events)+len(r.msgs))+createdSize(loc.ref.Home, filled{}))
}

// startRoom is historyRoom for n bytes of a send's start in loc: a temp
// session's are memory only, bounded by the temp sessions' bytes.
func (e *Engine) startRoom(loc *location, n int64) error {
	if loc.ref.Temp {
		return nil
	}
	return e.historyRoom(loc.ref.Home, n)
}

// sendTo sends to a loaded session: the provability check, then the replay
// check, then the cwd resolution, then the records. retry is true when a
// concurrent send with the same client id failed and this one should look
// again.
func (e *Engine) sendTo(c layout.Caller, s *sess, loc *location, req *proto.Request, defn *def.Definition, cwd string, ticket *runTicket) (r *Reply, retry bool, err error) {
	if err := s.provable(); err != nil {
		return nil, false, err
	}
	rec, replay, err := s.claim(req.ID, req.Input, loc.scope, cwd)
	if err != nil || replay {
		if errors.Is(err, errRetry) {
			return nil, true, nil
		}
		if err != nil {
			return nil, false, err
		}
		return s.replay(rec), false, nil
	}
	r, err = e.startRun(c, s, loc, req, defn, cwd, rec, ticket)
	if err != nil {
		s.release(req.ID, rec)
	}
	return r, false, err
}

var errRetry = errors.New("retry")

// claim finds or reserves a client id. A seen id with the same input, scope
// and effective cwd is a replay; with any other payload it is EINVAL. A new
// id gets a pending record that this send owns until its start is recorded.
func (s *sess) claim(id, input, scope, cwd string) (rec *clientRecord, replay bool, err error) {
	s.mu.Lock()
	rec = s.clients[id]
	if rec == nil {
		rec = &clientRecord{sum: sumInput(input), scope: scope, cwd: cwd, ready: make(chan struct{})}
		s.clients[id] = rec
		s.mu.Unlock()
		return rec, false, nil
	}
	s.mu.Unlock()
	<-rec.ready // a concurrent first send with this id is still recording
	if rec.failed {
		return nil, false, errRetry
	}
	if rec.sum != sumInput(input) || rec.scope != scope || rec.cwd != cwd {
		return nil, false, abi.Errorf(syscall.EINVAL, "send", "client id %q was used before with another payload", id)
	}
	return rec, true, nil
}

// release gives up a pending claim whose send failed before its start.
func (s *sess) release(id string, rec *clientRecord) {
	s.mu.Lock()
	if s.clients[id] == rec {
		delete(s.clients, id)
	}
	s.mu.Unlock()
	rec.failed = true
	close(rec.ready)
}

// replay answers a retried send without running or writing anything: the
// original start frame, then the recorded done frame, or, while the run
// still runs, its live frames.
func (s *sess) replay(rec *clientRecord) *Reply {
	s.mu.Lock()
	done := rec.done
	rn := s.active[rec.run]
	s.mu.Unlock()
	if done != nil || rn == nil {
		fixed := []*proto.Object{rec.start}
		if done != nil {
			fixed = append(fixed, done)
		}
		return reply.New(fixed)
	}
	return s.replayLive(rec, rn)
}

// startRun records the start (SPEC 8 step 7: start event, user message,
// state, updated_at, index) durably, then queues the run.
func (e *Engine) startRun(c layout.Caller, s *sess, loc *location, req *proto.Request, defn *def.Definition, cwd string, rec *clientRecord, ticket *runTicket) (_ *Reply, err error) {
	// The caller's quota of runs is taken before anything is written (by
	// send, before it created the session, or here), and given back when
	// the run is forgotten (forgetRun) or refused.
	if ticket == nil {
		if ticket, err = e.takeRun(c.Uid); err != nil {
			return nil, err
		}
		defer ticket.cancel()
	}
	if err := e.admitTemp(c, loc, req); err != nil {
		return nil, err
	}
	recs, err := newStartRecords(c, loc, req, cwd)
	if err != nil {
		return nil, err
	}
	// The home's room for the start is looked at before the cwd makes the
	// caller's root/ (a shared session's is in the caller's own home): a
	// send its home's history refuses (EDQUOT) makes nothing.
	if err := e.startRoom(loc, int64(len(recs.events)+len(recs.msgs))); err != nil {
		return nil, err
	}
	dir, err := e.resolveCwd(c, loc, cwd)
	if err != nil {
		return nil, err
	}
	id, start := recs.run, recs.start
	if err := s.closePending(); err != nil {
		return nil, err
	}
	rn := e.newRun(s, id, req.ID, c, loc, defn, req.Input, cwd, dir, rec)
	rn.parent = req.Parent
	// Both logs at once, whole or not at all: the start is acknowledged
	// when both are durable, and a refused send writes nothing
	// (run_start.go: a model's first request is sent meanwhile).
	if err := rn.commitStart(recs.events, recs.msgs); err != nil {
		return nil, err
	}
	// The start goes to the stream before the run is visible in s.active:
	// a resume or replay that finds the run finds its start in the log, and
	// must not get it from the stream as well.
	join := rn.stream.Join
	if req.Parent != "" {
		join = rn.stream.JoinKept // the sender is the child's watcher (children.Book.watch)
	}
	sender := join() // before the first frame: the sender reads them all
	rn.stream.Push(start)
	rn.register()
	ticket.spend() // the run holds it now
	s.recordStart(recs.now, cwd, abi.StateActive)
	rec.run, rec.start = id, start
	close(rec.ready)
	gopool.Go(rn.execute) // a kept goroutine keeps its grown stack
	return reply.New(nil, sender), nil
}

// runDir is where a run works: its chroot root (store-relative, "" for a
// model session, which has none) and its cwd resolved inside it.
type runDir struct {
	root string
	rel  string // "." for the root itself
	own  storefs.Owner
}

// resolveCwd resolves an agent session's cwd inside its chroot root (SPEC 8
// step 6). Model sessions have no chroot and run in "/".
func (e *Engine) resolveCwd(c layout.Caller, loc *location, cwd string) (runDir, error) {
	rootRel := loc.ref.Container.ChrootRel(c.Uid)
	if rootRel == "" {
		return runDir{}, nil
	}
	own := loc.own
	if loc.scope == abi.ScopeShared {
		own = layout.PrivateOwner(c.Uid, c.Gid)
	}
	forbidden := []string{e.cfg.Store, e.cfg.Root}
	root, err := e.root.OpenDirPath(rootRel)
	if errors.Is(err, fs.ErrNotExist) {
		// Made at the first send that can run in it: one refused for its
		// cwd makes nothing.
		if _, err := agent.ResolveCwd(nil, cwd, forbidden); err != nil {
			return runDir{}, err
		}
		root, err = e.makeChroot(rootRel, own)
	} else if err == nil {
		mendChrootOwner(root, own)
	}
	if err != nil {
		return runDir{}, err
	}
	defer root.Close()
	rel, err := agent.ResolveCwd(root, cwd, forbidden)
	if err != nil {
		return runDir{}, err
	}
	return runDir{root: rootRel, rel: rel, own: own}, nil
}

// makeChroot makes a chroot root (owned by own) and opens it to resolve a
// cwd beneath (O_PATH: its filesystem is not asked to open it). The
// caller opened it first and makes it only when that failed: an existing
// root costs one walk of the store, not an lstat and then an open
// (docs/benchmarks.md#send-path).
// A first send makes the agent's directory with it: one of the home's
// agents (makeAgent).
func (e *Engine) makeChroot(rootRel string, own storefs.Owner) (*os.File, error) {
	mk := func() error { return layout.MkdirAll(e.root, rootRel, own) }
	if err := e.makeAgent(layout.Classify(rootRel).Home, path.Dir(rootRel), mk); err != nil {
		return nil, err
	}
	return e.root.OpenDirPath(rootRel)
}

// mendChrootOwner gives an agent's root/ (open as f) back to its owner when
// it is the server's: a kill between the mkdir that makes it and the chown
// that follows (layout.MkdirAll) leaves it so, its user could not run
// there, and fsck names it (TestHistoryFaultSchedules met one in CI).
// Only a directory of root's, which no user can make there, is changed;
// one root gave another owner by hand stays as it is.
func mendChrootOwner(f *os.File, own storefs.Owner) {
	var st unix.Stat_t
	if own.Uid <= 0 || unix.Fstat(int(f.Fd()), &st) != nil || st.Uid != 0 || st.Gid != 0 {
		return
	}
	unix.Fchownat(int(f.Fd()), "", own.Uid, own.Gid, unix.AT_EMPTY_PATH)
}

// hostPath is the directory a run without a jail works in, as a path
// under the mount: the store is root's alone, and a program run as the
// user never gets a path inside it.
func (e *Engine) hostPath(d runDir) string {
	if d.root == "" {
		return "/"
	}
	return e.mountPath(path.Join(d.root, d.rel))
}

// appendEvents appends frames to events.jsonl in one durable batch.
func (s *sess) appendEvents(frames ...*proto.Object) error {
	var b []byte
	for _, f := range frames {
		b = append(b, f.Line()...)
	}
	_, err := s.events.Append(b)
	if err == nil {
		s.appended(abi.FileEvents)
	}
	return err
}

// appendEventsOwed is appendEvents for the end of a run, recorded even
// past the home's bound on history (sealedlog.Log.AppendOwed): a few
// hundred bytes a run, so that a run stopped because its frames did not
// fit ends in the log and its session is not left running.
func (s *sess) appendEventsOwed(frames ...*proto.Object) error {
	var b []byte
	for _, f := range frames {
		b = append(b, f.Line()...)
	}
	_, err := s.events.AppendOwed(b)
	if err == nil {
		s.appended(abi.FileEvents)
	}
	return err
}

// Begin validates and starts one request. It returns an error (an
// *abi.Error) when the request is refused, before anything is written;
// otherwise a Reply whose frames the caller reads with Next until io.EOF.
// For send, Begin returns once the start frame is recorded durably.
func (e *Engine) Begin(ctx context.Context, c layout.Caller, t Target, req *proto.Request) (*Reply, error) {
	if req.Op == proto.OpPing {
		return reply.New([]*proto.Object{proto.NewObject("type", proto.FramePong)}), nil
	}
	if !(layout.Container{Kind: t.Kind, Owner: t.Owner}).Valid() {
		return nil, abi.Errorf(syscall.EINVAL, "", "bad target %s %s", t.Kind, t.Owner)
	}
	loc, err := e.locate(c, t, req)
	if err != nil {
		return nil, err
	}
	return e.dispatch(c, loc, req)
}

// BeginControl is Begin for a request written to a session's ctl file:
// the request's session, scope and space, when present, must name r and
// its scope and space (EINVAL).
func (e *Engine) BeginControl(ctx context.Context, c layout.Caller, r layout.Ref, req *proto.Request) (*Reply, error) {
	scope := scopeOfHome(r.Home)
	if req.SessionGiven && req.Session != r.Name {
		return nil, abi.Errorf(syscall.EINVAL, "ctl", "request names session %q, this is %q", req.Session, r.Name)
	}
	if req.ScopeGiven && req.Scope != scope {
		return nil, abi.Errorf(syscall.EINVAL, "ctl", "request names scope %q, this session is %s", req.Scope, scope)
	}
	if req.Op == proto.OpPing {
		return reply.New([]*proto.Object{proto.NewObject("type", proto.FramePong)}), nil
	}
	loc, err := e.locateRef(c, r)
	if err != nil {
		return nil, err
	}
	if req.Space != "" && req.Space != loc.space {
		return nil, abi.Errorf(syscall.EINVAL, "ctl", "request names space %q, this session is in %s", req.Space, spaceWords(loc.space))
	}
	req.Session, req.Scope, req.Space = r.Name, scope, loc.space
	return e.dispatch(c, loc, req)
}

// spaceWords names a session's space for a message ("no space": a home).
func spaceWords(space string) string {
	if space == "" {
		return "no space"
	}
	return "space " + strconv.Quote(space)
}

func (e *Engine) dispatch(c layout.Caller, loc *location, req *proto.Request) (*Reply, error) {
	switch req.Op {
	case proto.OpSend:
		return e.send(c, loc, req)
	case proto.OpCancel:
		return e.cancel(c, loc, req)
	case proto.OpStatus:
		return e.status(c, loc)
	case proto.OpCompact:
		return e.compact(c, loc)
	case proto.OpResume:
		return e.resume(loc, req)
	case proto.OpSearch:
		return e.search(c, loc, req)
	case proto.OpArchive:
		return e.archiveOp(c, loc, req)
	case proto.OpArchivable: // gc's preview: every candidate by checkArchive
		return archivable.Answer(loc.ref.Container, req.Sessions, e.checkArchive), nil
	case proto.OpApprove, proto.OpAnswer:
		return e.decide(c, loc, req)
	case proto.OpPending:
		return e.pending(c, loc, req)
	case proto.OpRestore:
		return e.restore(c, loc, req)
	}
	return nil, abi.Errorf(syscall.EINVAL, "", "unknown op %q", req.Op)
}
