package session

import (
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/reply"
	"github.com/ctxfs/ctxfs/session/waiting"
)

// decide answers a waiting call (ops approve and answer, SPEC 17): only the
// uid the waiting room names may (EACCES), and only from outside every
// run's jail; ENOENT when no such call waits here, EALREADY when it was
// answered. The reply is the answer as recorded.
func (e *Engine) decide(c layout.Caller, loc *location, req *proto.Request) (*Reply, error) {
	if err := FromHost(c); err != nil {
		return nil, err
	}
	k := waiting.Key{Run: req.Run, Call: req.ID}
	// Another uid is refused EACCES by the waiting room, wherever it asks.
	if call, ok := e.waiting.Waiting(req.Run); ok && call.Owner == c.Uid && !placeMatches(call.Place, loc, req) {
		return nil, abi.Errorf(syscall.ENOENT, req.Op, "run %s waits in another session", req.Run)
	}
	a := waiting.Answer{Kind: waiting.KindApproval, Decision: req.Decision, Reason: req.Reason}
	if req.Op == proto.OpAnswer {
		a = waiting.Answer{Kind: waiting.KindQuestion, Text: req.Text}
	}
	a.Groups = append([]uint32{c.Gid}, c.Groups...)
	fr, err := e.waiting.Answer(c.Uid, k, a)
	if err != nil {
		return nil, err
	}
	return reply.New([]*proto.Object{fr}), nil
}

// placeMatches says whether a waiting call is in the request's session,
// or at its agent when the request names no session (a socket's).
func placeMatches(p waiting.Place, loc *location, req *proto.Request) bool {
	if p.Agent != loc.ref.Owner || p.Scope != loc.scope || p.Space != loc.space {
		return false
	}
	return !req.SessionGiven || p.Session == loc.ref.Name
}

// FromHost refuses an answer from a process in another PID namespace
// than the server's: a jailed run's program or tool sees its session's
// ctl file, and must not approve its own calls. c.Pid is the process
// that writes the answer (a ctl file's writer at its WRITE, not its
// opener, which may be gone and its pid another's). A namespace that
// cannot be read is refused too: the writer is gone, or hidden from the
// server, and nothing says it is not jailed. Pid 0 is a socket's peer
// (no jail reaches the sockets) or a request another host relayed, which
// that host checked against its writer before (cluster/replica); a
// negative pid, a writer the kernel did not name, is refused.
func FromHost(c layout.Caller) error {
	if c.Pid == 0 {
		return nil
	}
	mine, err1 := os.Readlink("/proc/self/ns/pid")
	theirs, err2 := os.Readlink("/proc/" + strconv.Itoa(c.Pid) + "/ns/pid")
	switch {
	case err1 != nil || err2 != nil:
		return abi.Errorf(syscall.EACCES, "approve", "the answer's writer (pid %d) cannot be told apart from a jailed run's process", c.Pid)
	case mine != theirs:
		return abi.Errorf(syscall.EACCES, "approve", "an answer must come from outside the run's jail")
	}
	return nil
}

// pending lists the waiting calls the caller may answer at this agent
// (and in the request's session when it names one), oldest first.
func (e *Engine) pending(c layout.Caller, loc *location, req *proto.Request) (*Reply, error) {
	filter := waiting.Place{Agent: loc.ref.Owner}
	if req.SessionGiven {
		filter.Session, filter.Scope, filter.Space = loc.ref.Name, loc.scope, loc.space
	}
	calls := e.waiting.List(c.Uid, filter)
	frames := make([]*proto.Object, 0, len(calls)+1)
	for _, call := range calls {
		frames = append(frames, pendingFrame(call))
	}
	frames = append(frames, proto.NewObject("type", proto.FramePendingEnd, "count", len(calls)))
	return reply.New(frames), nil
}

func pendingFrame(call waiting.Call) *proto.Object {
	f := proto.NewObject("type", proto.FramePending, "agent", call.Agent, "session", call.Session, "scope", call.Scope)
	if call.Space != "" {
		f.Set("space", call.Space)
	}
	f.Set("run", call.Run)
	f.Set("id", call.Call)
	f.Set("kind", call.Kind)
	if call.Kind == waiting.KindApproval {
		f.Set("name", call.Name)
		f.Set("arguments", call.Arguments)
	} else {
		f.Set("text", call.Text)
	}
	f.Set("since", abi.TS(call.Since))
	f.Set("deadline", abi.TS(call.Deadline))
	return f
}

// dormantRuns are the runs of a session that wait in the waiting room
// with no run of this process: status shows them in their call's phase.
func (e *Engine) dormantRuns(s *sess, loc *location) []*proto.Object {
	var out []*proto.Object
	for _, call := range e.waiting.InSession(waiting.Place{Agent: loc.ref.Owner, Session: loc.ref.Name, Scope: loc.scope, Space: loc.space}) {
		s.mu.Lock()
		_, live := s.active[call.Run]
		s.mu.Unlock()
		if !live {
			out = append(out, proto.NewObject("run", call.Run, "phase", call.Kind))
		}
	}
	return out
}

// cancelDormant ends a dormant run (run_resume.go) that the caller may
// answer: its call leaves the waiting room and the run ends done
// cancelled. False when run is no dormant run of s.
func (s *sess) cancelDormant(c layout.Caller, run string) bool {
	call, ok := s.e.waiting.Waiting(run)
	if !ok || call.Owner != c.Uid || call.Agent != s.ref.Owner || call.Session != s.ref.Name {
		return false
	}
	s.mu.Lock()
	_, live := s.active[run]
	rec := s.clients[s.recordOf(run)]
	s.mu.Unlock()
	if live || rec == nil || rec.done != nil {
		return false
	}
	if _, removed := s.e.waiting.Remove(run); !removed {
		return false
	}
	now := abi.TS(time.Now())
	done := proto.NewObject("type", proto.FrameDone, "run", run, "status", abi.StateCancelled, "ts", now)
	state := proto.NewObject("type", proto.FrameState, "state", abi.StateCancelled, "run", run, "ts", now)
	// Recorded even past the home's bound on history, as a stopped run's
	// end is: the call has left the waiting room, and a refusal here
	// left the run neither waiting nor done until the next load.
	if s.appendEventsOwed(done, state) == nil {
		s.mu.Lock()
		rec.done = done
		s.mu.Unlock()
		s.writeState(abi.StateCancelled)
		s.e.running.End(run)
	}
	return true
}

// recordOf is the client id of run's record. Caller holds s.mu.
func (s *sess) recordOf(run string) string {
	for id, rec := range s.clients {
		if rec.run == run {
			return id
		}
	}
	return ""
}
