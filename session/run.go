package session

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
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

	mu        sync.Mutex
	phase     string // "queued" or "running"
	cancelled bool   // once set, nothing the program prints is recorded
	sawMsg    bool   // an assistant message was recorded
	deltas    strings.Builder
	broken    error // the first record that failed
	ending    bool  // endRun has begun (guarded by s.mu)
}

func (e *Engine) newRun(s *sess, id string, c Caller, loc *location, def *agent.Definition, input, cwd, hostCwd string, rec *clientRecord) *run {
	uid, gid := uint32(loc.own.uid), uint32(loc.own.gid)
	if loc.scope != abi.ScopePrivate {
		uid, gid = c.Uid, c.Gid
	}
	sessDir := filepath.Join(e.cfg.Root, loc.ref.Rel())
	ctx, cancel := context.WithCancel(context.Background())
	rn := &run{id: id, s: s, rec: rec, stream: newStream(), ctx: ctx, cancel: cancel, phase: "queued"}
	rn.spec = agent.Spec{
		RunID: id, Session: loc.ref.Name, Scope: loc.scope, Def: def,
		Uid: uid, Gid: gid, Input: input, Dir: hostCwd,
		Env: map[string]string{
			"CTX_RUN_ID": id, "CTX_AGENT": loc.ref.Owner, "CTX_SESSION": loc.ref.Name,
			"CTX_SCOPE": loc.scope, "CTX_SESSION_DIR": sessDir, "CTX_CWD": cwd,
			"CTX_HOME": filepath.Join(e.cfg.Root, PrivateHome(uid)),
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

// execute waits for a run slot, runs the agent, and records the end.
func (rn *run) execute() {
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
	ok := agent.Run(rn.ctx, rn.spec, rn.record)
	rn.finish(ok)
}

// record stamps a frame from the agent with its run and time, writes it to
// the logs durably, and only then passes it to the readers.
func (rn *run) record(f *proto.Object) {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if rn.cancelled || rn.broken != nil {
		return
	}
	fr := stamp(f, rn.id, time.Now())
	typ := fr.Str("type")
	if typ == proto.FrameDelta {
		text, _ := fr.String("text")
		rn.deltas.WriteString(text)
		rn.stream.push(fr)
		return
	}
	if err := rn.s.recordFrame(fr); err != nil {
		rn.broken = err
		rn.stream.push(proto.ErrorFrame(err))
		rn.cancel() // damaged history is never built upon
		return
	}
	if typ == proto.FrameMessage && roleOf(fr) == "assistant" {
		rn.sawMsg = true
	}
	rn.stream.push(fr)
}

// stamp rebuilds a frame as {"type", "run", …its other fields…, "ts"}.
func stamp(f *proto.Object, run string, t time.Time) *proto.Object {
	out := proto.NewObject("type", f.Str("type"), "run", run)
	for _, fl := range f.Fields {
		switch fl.Key {
		case "type", "run", "ts":
			continue
		}
		out.Fields = append(out.Fields, fl)
	}
	out.Set("ts", abi.TS(t))
	return out
}

func roleOf(f *proto.Object) string {
	if r, ok := f.String("role"); ok {
		return r
	}
	return "assistant"
}

// recordFrame writes one stamped frame: always to events.jsonl; messages
// and tool results also to messages.jsonl; an assistant message also to
// latest.md.
func (s *sess) recordFrame(fr *proto.Object) error {
	if err := s.appendEvents(fr); err != nil {
		return err
	}
	var msg *proto.Object
	switch fr.Str("type") {
	case proto.FrameMessage:
		msg = proto.NewObject("role", roleOf(fr), "run", fr.Raw("run"), "content", contentOf(fr), "ts", fr.Raw("ts"))
	case proto.FrameToolResult:
		res := proto.NewObject("type", "tool_result", "tool_call_id", fr.Raw("tool_call_id"), "content", contentOf(fr), "is_error", fr.Raw("is_error") != nil && string(fr.Raw("is_error")) == "true")
		msg = proto.NewObject("role", "tool", "run", fr.Raw("run"))
		if name := fr.Raw("name"); name != nil {
			msg.Set("name", name)
		}
		msg.Set("content", []*proto.Object{res})
		msg.Set("ts", fr.Raw("ts"))
	}
	if msg != nil {
		if _, err := s.msgs.Append(msg.Line()); err != nil {
			return err
		}
		if roleOf(msg) == "assistant" {
			s.writeLatest(msg)
		}
	}
	s.touch(time.Now(), "")
	return nil
}

func contentOf(f *proto.Object) json.RawMessage {
	if c := f.Raw("content"); c != nil {
		return c
	}
	return json.RawMessage(`""`)
}

// finish records the end of a run: the assistant text streamed as deltas
// when no message carried it, then done and the session's new state.
func (rn *run) finish(ok bool) {
	rn.mu.Lock()
	if !rn.cancelled && rn.broken == nil && !rn.sawMsg && rn.deltas.Len() > 0 {
		rn.mu.Unlock()
		text := []*proto.Object{proto.NewObject("type", "text", "text", rn.deltas.String())}
		rn.record(proto.NewObject("type", proto.FrameMessage, "role", "assistant", "content", text))
		rn.mu.Lock()
	}
	status := "ok"
	switch {
	case rn.cancelled:
		status = abi.StateCancelled
	case !ok || rn.broken != nil:
		status = abi.StateError
	}
	rn.mu.Unlock()
	rn.s.endRun(rn, status)
}

// endRun records done (and the new state, once no other run is active),
// hands the done frame to the readers, and forgets the run.
func (s *sess) endRun(rn *run, status string) {
	now := time.Now()
	done := proto.NewObject("type", proto.FrameDone, "run", rn.id, "status", status, "ts", abi.TS(now))
	s.mu.Lock()
	rn.ending = true
	others := 0
	for _, o := range s.active {
		if !o.ending {
			others++
		}
	}
	s.mu.Unlock()
	frames := []*proto.Object{done}
	state := map[string]string{"ok": abi.StateDone, "error": abi.StateError, "cancelled": abi.StateCancelled}[status]
	if others == 0 {
		frames = append(frames, proto.NewObject("type", proto.FrameState, "state", state, "run", rn.id, "ts", abi.TS(now)))
	}
	// Record and push under rn.mu, as record does, so that resume never
	// sees the done frame both in the log and in the stream.
	rn.mu.Lock()
	if rn.broken == nil {
		if err := s.appendEvents(frames...); err != nil {
			rn.stream.push(proto.ErrorFrame(err))
		} else if others == 0 {
			s.writeState(state)
		}
		s.touch(now, "")
	}
	s.mu.Lock()
	rn.rec.done = done
	delete(s.active, rn.id)
	s.mu.Unlock()
	s.e.forgetRun(rn) // before done reaches anyone: a client that saw done finds no trace of the run
	rn.stream.push(done)
	rn.stream.end()
	rn.mu.Unlock()
}

// cancelRun stops a queued or running run (SPEC section 10): the agent's
// process group gets SIGTERM, then SIGKILL; nothing it prints afterwards is
// recorded; done says cancelled.
func (rn *run) cancelRun() {
	rn.mu.Lock()
	rn.cancelled = true
	rn.mu.Unlock()
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
	if s.dir != "" && s.cwd != cwd {
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
	if s.dir == "" {
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
	if s.dir == "" {
		return
	}
	s.fileMu.Lock()
	s.writeFileLocked(abi.FileState, state+"\n")
	s.fileMu.Unlock()
}

// writeLatest replaces latest.md with the text of an assistant message.
func (s *sess) writeLatest(msg *proto.Object) {
	if s.dir == "" {
		return
	}
	s.fileMu.Lock()
	s.writeFileLocked(abi.FileLatest, messageText(msg.Raw("content"))+"\n")
	s.fileMu.Unlock()
}

// writeFileLocked replaces one of the session's files. A failure here does
// not fail the run: these files are derived from the logs, which are
// already durable; it is reported on stderr for the operator.
func (s *sess) writeFileLocked(name, value string) {
	if err := s.own.writeValue(filepath.Join(s.dir, name), []byte(value)); err != nil {
		os.Stderr.WriteString("ctxfs: " + s.ref.Rel() + "/" + name + ": " + err.Error() + "\n")
	}
	s.e.changed(s.ref.Rel() + "/" + name)
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

// runningDir holds one marker file per run in progress, naming its
// session, so that the next start finds runs a crash interrupted without
// scanning every session. Markers are bookkeeping, never history.
func (e *Engine) runningDir() string { return filepath.Join(e.stateDir, "running") }

func (e *Engine) markRunning(rn *run) {
	if rn.s.dir == "" {
		return
	}
	os.WriteFile(filepath.Join(e.runningDir(), rn.id), []byte(rn.s.ref.Rel()+"\n"), 0o600)
}

func (e *Engine) forgetRun(rn *run) {
	e.mu.Lock()
	delete(e.runs, rn.id)
	e.mu.Unlock()
	if rn.s.dir != "" {
		os.Remove(filepath.Join(e.runningDir(), rn.id))
	}
}

// closeInterrupted loads every session that had a run in progress when the
// previous server stopped; loading closes such runs (closeInterruptedRun).
func (e *Engine) closeInterrupted() {
	ents, _ := os.ReadDir(e.runningDir())
	for _, ent := range ents {
		marker := filepath.Join(e.runningDir(), ent.Name())
		rel, err := readValue(marker)
		if err == nil {
			if ct, rest, ok := ParseContainerRel(rel); ok && abi.ValidSessionName(rest) {
				e.lookup(Ref{Container: ct, Name: rest})
			}
		}
		os.Remove(marker)
	}
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
