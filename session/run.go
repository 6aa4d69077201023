package session

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/internal/gopool"
	"github.com/ctxfs/ctxfs/internal/logx"
	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/children"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/reply"
	"github.com/ctxfs/ctxfs/session/runqueue"
)

// run is one send's agent turn, queued or running in this process.
type run struct {
	id     string
	s      *sess
	caller uint32 // whose quota of runs it holds
	// groups are its caller's supplementary groups as its send (or the
	// answer that resumed it) came: a child it starts in its shared
	// space is let in with them (toolHost.Create), as the run was.
	groups []uint32
	dir    runDir // where it works
	// clientID is its send's client id, and started when it was accepted:
	// cancel finds the newest run of a client id (findRun).
	clientID string
	parent   string // the run that started it with agent.create, "" for none
	started  time.Time
	rec      *clientRecord
	spec     agent.Spec
	stream   *reply.Stream

	ctx    context.Context
	cancel context.CancelFunc

	// mu is held while a batch is recorded and handed to the readers, so
	// that resume never sees a frame both in the log and in the stream.
	mu     sync.Mutex
	phase  string   // "queued" or "running"
	sawMsg bool     // an assistant message was recorded
	deltas []string // text streamed as deltas, in pieces, until it is recorded
	broken error    // the first record that failed: nothing more is recorded
	ending bool     // the final batch has begun (guarded by s.mu)
	// finalState is the state the final batch recorded ("" when another
	// run was still active).
	finalState string

	q *runqueue.Queue // between the agent and the recorder

	errCode string // the errno of the last error frame recorded, for the log (guarded by mu)

	host    *toolHost // a model run's side of its tools (run_tools.go)
	resumed bool      // a dormant run continued after a restart (run_resume.go)
	// early: its slot taken, its rules read and a model API run's prompt
	// made (and maybe its first request sent) while its start synced
	// (run_start.go)
	early bool
	asked chan struct{} // closed once the early work is done
	rules string        // the merged rules (runRules)
	over  chan struct{} // closed when the run has ended
}

// newRun makes a run of the session, not yet visible (register): its
// stream is to hold its start frame first.
func (e *Engine) newRun(s *sess, id, clientID string, c layout.Caller, loc *location, defn *def.Definition, input, cwd string, dir runDir, rec *clientRecord) *run {
	uid, gid := uint32(loc.own.Uid), uint32(loc.own.Gid)
	var groups []uint32
	if loc.scope != abi.ScopePrivate {
		uid, gid, groups = c.Uid, c.Gid, spaceGroup(c, loc)
	}
	sessDir := e.mountPath(loc.ref.Rel())
	ctx, cancel := context.WithCancel(context.Background())
	rn := &run{id: id, s: s, rec: rec, caller: c.Uid, groups: c.Groups, dir: dir, clientID: clientID, started: time.Now(), stream: reply.NewStream(), ctx: ctx, cancel: cancel, phase: "queued", over: make(chan struct{})}
	rn.q = runqueue.New(id, maxRunStream, rn.cancel)
	rn.host = &toolHost{rn: rn}
	rn.spec = agent.Spec{
		RunID: id, Session: loc.ref.Name, Scope: loc.scope, Def: defn,
		Uid: uid, Gid: gid, Groups: groups, Input: input, Dir: e.hostPath(dir),
		Env: map[string]string{
			"CTX_RUN_ID": id, "CTX_AGENT": loc.ref.Owner, "CTX_SESSION": loc.ref.Name,
			"CTX_SCOPE": loc.scope, "CTX_SESSION_DIR": sessDir, "CTX_CWD": cwd,
			"CTX_HOME": e.mountPath(layout.PrivateHome(uid)),
			"PATH":     "/usr/local/bin:/usr/bin:/bin",
		},
	}
	return rn
}

// spaceGroup is the supplementary group a run in a shared space needs
// beside its caller's gid: the space's, whose session directories are
// drwxrws--- root:SPACE, when the caller is in it by a supplementary group
// (its program could not list its own session directory without it). No
// other group of the caller's: the program needs none, and a caller who
// is not in the space's group (one its mode lets in otherwise) gains
// nothing.
func spaceGroup(c layout.Caller, loc *location) []uint32 {
	g := uint32(loc.own.Gid)
	if loc.scope != abi.ScopeShared || g == c.Gid || !c.InGroup(g) {
		return nil
	}
	return []uint32{g}
}

// register makes the run visible (s.active, the engine's runs, the runs
// file) once its stream holds its start: resume and replays find the start
// in the log and follow the stream from the frame after it.
func (rn *run) register() {
	s, e := rn.s, rn.s.e
	s.mu.Lock()
	s.active[rn.id] = rn
	s.mu.Unlock()
	e.mu.Lock()
	e.runs[rn.id] = rn
	e.mu.Unlock()
	e.markRunning(rn)
	logx.Line(e.cfg.Log, slog.LevelInfo, "run start", s.logAttrs(rn.id, rn.spec.Scope, "uid", rn.caller)...)
}

// logAttrs name a run of the session in the server's log (agent=NAME or
// model=P/M), with extra attributes after: never its input nor its output.
func (s *sess) logAttrs(run, scope string, extra ...any) []any {
	return append([]any{"run", run, s.ref.Kind, s.ref.Owner, "session", s.ref.Name, "scope", scope, "home", s.ref.Home}, extra...)
}

// logEnd logs how a run ended: done (ok or cancelled) at info, an error
// with the errno of its last error frame at warn, and an end that could
// not be recorded (done nil) at error, with the server-side cause. The
// errno comes from the agent's frames too: it is cut to a name's length.
func (rn *run) logEnd(done *proto.Object) {
	log := rn.s.e.cfg.Log
	code := rn.errCode
	if len(code) > 32 {
		code = code[:32]
	}
	attrs := rn.s.logAttrs(rn.id, rn.spec.Scope, "uid", rn.caller, "took", time.Since(rn.started).Round(time.Millisecond).String())
	if done == nil {
		logx.Line(log, slog.LevelError, "run error", append(attrs, "status", abi.StateError, "error", code, "recorded", false, "cause", fmt.Sprint(rn.broken))...)
		return
	}
	switch status := done.Str("status"); status {
	case abi.StateError:
		logx.Line(log, slog.LevelWarn, "run error", append(attrs, "status", status, "error", code)...)
	default:
		logx.Line(log, slog.LevelInfo, "run done", append(attrs, "status", status)...)
	}
}

// execute waits for a run slot, runs the agent, and records the end. The
// agent's frames go through the run's recorder (run_record.go), so the agent is
// never held up by a sync and frames that arrive during one share the next.
func (rn *run) execute() {
	if rn.early {
		<-rn.asked                      // its rules, prompt and first request (syncAsking)
		defer func() { <-rn.s.slots }() // taken as its start synced
	}
	defer rn.spec.Early.Abort() // a first request sent early and not taken ends with the run
	gopool.Go(rn.recorder)
	release, ok := rn.s.e.kids.Wait(rn.ctx, rn.parent, rn.id) // a child's place among its parent's
	if !ok {
		rn.q.Finish(false)
		return
	}
	defer release()
	if !rn.early {
		select {
		case rn.s.slots <- struct{}{}:
			defer func() { <-rn.s.slots }()
		case <-rn.ctx.Done():
			rn.q.Finish(false)
			return
		}
		rn.rules = rn.s.e.runRules(rn)
	}
	rn.setPhase(phaseRunning)
	rn.s.e.writeSnapshots(rn, rn.rules)
	rn.spec.Host = rn.host // built-in tools, and a CLI's permission prompts
	if rn.spec.Def.AnsweredByAPI() {
		if rn.spec.Prompt == nil {
			rn.spec.Prompt = rn.prompt(rn.rules)
		}
		if rn.resumed {
			rn.spec.Resume = rn.s.resumeState(rn.id)
		}
	}
	err := rn.s.e.prepareCLI(rn)
	closeJail := func() {}
	if err == nil {
		closeJail, err = rn.s.e.prepareJail(rn)
	}
	if err != nil {
		rn.q.Add(proto.ErrorFrame(err))
		rn.q.Finish(false)
		return
	}
	defer closeJail()
	rn.q.Finish(agent.Run(rn.ctx, rn.spec, rn.q.Add))
}

// cancelRun stops a queued or running run (SPEC section 10): the agent's
// process group gets SIGTERM, then SIGKILL; nothing it prints afterwards is
// recorded; done says cancelled.
func (rn *run) cancelRun() {
	rn.q.Cancel()
	rn.cancel()
}

func (rn *run) phaseNow() string {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	return rn.phase
}

// recordStart writes the single-value files a send changes: state, cwd,
// updated_at, and the index.
func (s *sess) recordStart(now time.Time, cwd, state string) {
	s.writeState(state)
	s.fileMu.Lock()
	if s.rel != "" && s.cwd != cwd {
		// At once, not behind: the logs do not say which came last, a
		// send's cwd or one a user wrote, so a load could not re-derive it;
		// and it changes only when a send names another cwd.
		s.writeNowLocked(abi.FileCwd, cwd+"\n")
	}
	s.cwd = cwd
	s.fileMu.Unlock()
	s.touch(now, cwd)
}

// touch updates updated_at (when the second changed) and moves the session
// to the top of its index; with a cwd (a send) it also sets current and the
// by-cwd entry.
func (s *sess) touch(now time.Time, cwd string) {
	if s.rel == "" {
		s.fileMu.Lock()
		s.updatedAt = now.Unix() // status's; a temp session has no file nor index
		s.fileMu.Unlock()
		return
	}
	s.setUpdatedAt(now.Unix())
	if x, err := s.e.Index(s.ref.Container); err == nil {
		// The index announces what it changes (list, current, by-cwd/),
		// and only when it changes: an append to the session already at
		// the top of the list announces nothing. Announcing index/ itself
		// at every touch as well cost each append through the mount a
		// second walk of the kernel's nodes and the memo.
		x.Touch(s.ref.Name, cwd)
	}
}

// setUpdatedAt writes updated_at when the second changed.
func (s *sess) setUpdatedAt(sec int64) {
	s.fileMu.Lock()
	if sec != s.updatedAt {
		s.updatedAt = sec
		s.writeFileLocked(abi.FileUpdatedAt, strconv.FormatInt(sec, 10)+"\n")
	}
	s.fileMu.Unlock()
}

func (s *sess) writeState(state string) {
	s.fileMu.Lock()
	if s.rel == "" {
		s.tempState = state
	} else {
		s.writeFileLocked(abi.FileState, state+"\n")
	}
	s.fileMu.Unlock()
}

// writeLatest replaces latest.md with the text of an assistant message.
func (s *sess) writeLatest(msg *proto.Object) {
	if s.rel == "" {
		return
	}
	s.fileMu.Lock()
	s.writeFileLocked(abi.FileLatest, proto.MessageOf(msg).Text()+"\n")
	s.fileMu.Unlock()
}

// writeFileDurably replaces a file a user wrote through the mount: durable
// (data and name synced) before the close that wrote it returns.
func (s *sess) writeFileDurably(name, value string) error {
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	if err := s.e.writeValue(s.file(name), []byte(value), s.own); err != nil {
		return err
	}
	s.e.derived.Drop(s.file(name)) // a derived value still to be written is superseded
	s.e.changed(s.ref.Rel() + "/" + name)
	return nil
}

// closeInterruptedRun ends a run that started but never finished because
// the server died: an error event with code EINTR, done error, state error.
func (s *sess) closeInterruptedRun(rec *clientRecord) {
	errEv, done := errorEnd(rec.run, syscall.EINTR, "the run was interrupted: the server stopped while it was active", "interrupted", true)
	kids := s.e.childFiles(s.rel, requester(rec)).Interrupted() // the children it followed end with it (SPEC 18)
	for i, f := range kids {
		kids[i] = runqueue.Stamp(f, rec.run, time.Now())
	}
	if len(kids) > 0 {
		s.appendEvents(kids...) // one durable append for all
	}
	s.e.childFiles(children.ParentSession(rec.start.Str("parent_session"), s.ref.Home), requester(rec)).Closed(rec.run)
	s.endRun(rec, errEv, done)
	s.e.cfg.Log.Warn("run error", s.logAttrs(rec.run, rec.scope, "status", abi.StateError, "error", abi.ErrnoName(syscall.EINTR), "interrupted", true)...)
}

// errorEnd is the end of a run that failed outside its agent's frames:
// its error event (errno and words) and its done error, with extra fields
// before the time stamp, both stamped now.
func errorEnd(run string, errno syscall.Errno, message string, extra ...any) (errEv, done *proto.Object) {
	now := abi.TS(time.Now())
	errEv = proto.NewObject("type", proto.FrameError, "run", run, "code", abi.ErrnoName(errno), "message", message, "ts", now)
	done = proto.NewObject(append(append([]any{"type", proto.FrameDone, "run", run, "status", abi.StateError}, extra...), "ts", now)...)
	return errEv, done
}

// pendingEnd is the end of a run that could not be recorded when it came
// (a full disk): recorded at the session's next append (closePending).
type pendingEnd struct {
	rec         *clientRecord
	errEv, done *proto.Object
}

// endRun records the end of a run outside its recorder: its error event,
// done, and state error when no other run of the session is active. It
// reports why not when that is not on disk: the end then waits in
// s.pending and the next append to the session records it first, so that
// the log never keeps a run without its end for longer than it must.
func (s *sess) endRun(rec *clientRecord, errEv, done *proto.Object) error {
	state := proto.NewObject("type", proto.FrameState, "state", abi.StateError, "run", rec.run, "ts", done.Raw("ts"))
	frames := []*proto.Object{errEv, done}
	if s.othersActive(rec.run) == 0 {
		frames = append(frames, state)
	}
	if err := s.appendEventsOwed(frames...); err != nil {
		s.mu.Lock()
		s.pending = append(s.pending, pendingEnd{rec, errEv, done})
		s.mu.Unlock()
		return err
	}
	s.mu.Lock()
	rec.done = done
	s.mu.Unlock()
	if len(frames) == 3 {
		s.writeState(abi.StateError)
	}
	return nil
}

// othersActive counts the runs of the session, other than run, that are
// active and not ending.
func (s *sess) othersActive(run string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for id, o := range s.active {
		if id != run && !o.ending {
			n++
		}
	}
	return n
}

// closePending records the ends that could not be recorded when their runs
// ended (endRun); it runs before every append to the session's logs, so a
// run's end comes before anything newer. An error is the append's to
// report: the disk is still full.
func (s *sess) closePending() error {
	s.mu.Lock()
	pending := s.pending
	s.pending = nil
	s.mu.Unlock()
	for i, p := range pending {
		if err := s.endRun(p.rec, p.errEv, p.done); err != nil {
			s.mu.Lock()
			s.pending = append(s.pending, pending[i+1:]...) // after p, which endRun queued again
			s.mu.Unlock()
			return err
		}
	}
	return nil
}

// Limits are the engine's quotas, for its transports (connections,
// handles) and itself (runs).
func (e *Engine) Limits() *quota.Limits { return e.limits }

// runTicket is a place in a caller's quota of runs, taken before anything
// of a send is written: spent when a run starts (the run gives it back
// when it is forgotten), else cancelled.
type runTicket struct {
	q    *quota.Quota
	uid  uint32
	held bool
}

func (e *Engine) takeRun(uid uint32) (*runTicket, error) {
	if err := e.limits.Runs.Take(uid); err != nil {
		return nil, err
	}
	return &runTicket{q: e.limits.Runs, uid: uid, held: true}, nil
}

// spend hands the place to a run that started.
func (t *runTicket) spend() { t.held = false }

// cancel gives the place back unless a run holds it. Nil-safe.
func (t *runTicket) cancel() {
	if t != nil && t.held {
		t.q.Give(t.uid)
		t.held = false
	}
}
