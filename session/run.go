package session

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent"
	"github.com/ctxfs/ctxfs/proto"
)

// run is one send's agent turn, queued or running in this process.
type run struct {
	id     string
	s      *sess
	rec    *clientRecord
	spec   agent.Spec
	stream *stream

	ctx    context.Context
	cancel context.CancelFunc

	// mu is held while a batch is recorded and handed to the readers, so
	// that resume never sees a frame both in the log and in the stream.
	mu     sync.Mutex
	phase  string // "queued" or "running"
	sawMsg bool   // an assistant message was recorded
	deltas strings.Builder
	broken error // the first record that failed: nothing more is recorded
	ending bool  // the final batch has begun (guarded by s.mu)
	// finalState is the state the final batch recorded ("" when another
	// run was still active).
	finalState string

	// q is the queue between the agent and the recorder.
	q         sync.Mutex
	queue     []*proto.Object
	wake      chan struct{} // a token when the queue or finished changed
	finished  bool          // the agent is done; ok says how
	ok        bool
	cancelled bool // once set, nothing the program prints is recorded
}

func (e *Engine) newRun(s *sess, id string, c Caller, loc *location, def *agent.Definition, input, cwd, hostCwd string, rec *clientRecord) *run {
	uid, gid := uint32(loc.own.Uid), uint32(loc.own.Gid)
	if loc.scope != abi.ScopePrivate {
		uid, gid = c.Uid, c.Gid
	}
	sessDir := e.mountPath(loc.ref.Rel())
	ctx, cancel := context.WithCancel(context.Background())
	rn := &run{id: id, s: s, rec: rec, stream: newStream(), ctx: ctx, cancel: cancel, phase: "queued", wake: make(chan struct{}, 1)}
	rn.spec = agent.Spec{
		RunID: id, Session: loc.ref.Name, Scope: loc.scope, Def: def,
		Uid: uid, Gid: gid, Input: input, Dir: hostCwd,
		Env: map[string]string{
			"CTX_RUN_ID": id, "CTX_AGENT": loc.ref.Owner, "CTX_SESSION": loc.ref.Name,
			"CTX_SCOPE": loc.scope, "CTX_SESSION_DIR": sessDir, "CTX_CWD": cwd,
			"CTX_HOME": e.mountPath(PrivateHome(uid)),
			"PATH":     "/usr/local/bin:/usr/bin:/bin",
		},
	}
	s.mu.Lock()
	s.active[id] = rn
	s.mu.Unlock()
	e.mu.Lock()
	e.runs[id] = rn
	e.mu.Unlock()
	e.markRunning(rn)
	return rn
}

// execute waits for a run slot, runs the agent, and records the end. The
// agent's frames go through the run's recorder (record.go), so the agent is
// never held up by a sync and frames that arrive during one share the next.
func (rn *run) execute() {
	go rn.recorder()
	select {
	case rn.s.slots <- struct{}{}:
		defer func() { <-rn.s.slots }()
	case <-rn.ctx.Done():
		rn.finish(false)
		return
	}
	rn.mu.Lock()
	rn.phase = "running"
	rn.mu.Unlock()
	rn.s.e.writeSnapshots(rn)
	rn.finish(agent.Run(rn.ctx, rn.spec, rn.enqueue))
}

// cancelRun stops a queued or running run (SPEC section 10): the agent's
// process group gets SIGTERM, then SIGKILL; nothing it prints afterwards is
// recorded; done says cancelled.
func (rn *run) cancelRun() {
	rn.q.Lock()
	rn.cancelled = true
	rn.q.Unlock()
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
		s.writeFileLocked(abi.FileCwd, cwd+"\n")
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
		return
	}
	s.fileMu.Lock()
	if sec := now.Unix(); sec != s.updatedAt {
		s.updatedAt = sec
		s.writeFileLocked(abi.FileUpdatedAt, strconv.FormatInt(sec, 10)+"\n")
	}
	s.fileMu.Unlock()
	if x, err := s.e.Index(s.ref.Container); err == nil {
		x.Touch(s.ref.Name, cwd)
	}
	s.e.changed(s.ref.Container.Rel() + "/index")
}

func (s *sess) writeState(state string) {
	if s.rel == "" {
		return
	}
	s.fileMu.Lock()
	s.writeFileLocked(abi.FileState, state+"\n")
	s.fileMu.Unlock()
}

// writeLatest replaces latest.md with the text of an assistant message.
func (s *sess) writeLatest(msg *proto.Object) {
	if s.rel == "" {
		return
	}
	s.fileMu.Lock()
	s.writeFileLocked(abi.FileLatest, messageText(msg.Raw("content"))+"\n")
	s.fileMu.Unlock()
}

// writeFileLocked replaces one of the session's derived files (see
// replaceValue: atomic, not synced). A failure here does not fail the run:
// these files are derived from the logs, which are already durable; it is
// reported on stderr for the operator.
func (s *sess) writeFileLocked(name, value string) {
	if err := s.e.replaceValue(s.file(name), []byte(value), s.own); err != nil {
		os.Stderr.WriteString("ctxfs: " + s.ref.Rel() + "/" + name + ": " + err.Error() + "\n")
	}
	s.e.changed(s.ref.Rel() + "/" + name)
}

// writeFileDurably replaces a file a user wrote through the mount: durable
// (data and name synced) before the close that wrote it returns.
func (s *sess) writeFileDurably(name, value string) error {
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	if err := s.e.writeValue(s.file(name), []byte(value), s.own); err != nil {
		return err
	}
	s.e.changed(s.ref.Rel() + "/" + name)
	return nil
}

// messageText is the text of a message's content: a string, or the text
// parts of a content array, joined.
func messageText(content json.RawMessage) string {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	json.Unmarshal(content, &parts)
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// closeInterruptedRun ends a run that started but never finished because
// the server died: an error event with code EINTR, done error, state error.
func (s *sess) closeInterruptedRun(rec *clientRecord) {
	now := abi.TS(time.Now())
	errEv := proto.NewObject("type", proto.FrameError, "run", rec.run, "code", abi.ErrnoName(syscall.EINTR),
		"message", "the run was interrupted: the server stopped while it was active", "ts", now)
	done := proto.NewObject("type", proto.FrameDone, "run", rec.run, "status", "error", "interrupted", true, "ts", now)
	state := proto.NewObject("type", proto.FrameState, "state", abi.StateError, "run", rec.run, "ts", now)
	if err := s.appendEvents(errEv, done, state); err != nil {
		return
	}
	rec.done = done
	s.writeState(abi.StateError)
}
