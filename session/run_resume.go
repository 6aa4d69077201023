package session

import (
	"encoding/json"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/internal/gopool"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/waiting"
)

// A run that waits for a person when the server stops is not interrupted
// (SPEC 17): its request is in events.jsonl, durable before anyone saw it,
// and at the next start the load that would close it finds the request
// unanswered and puts the call back in the waiting room, dormant. An
// answer then resumes the run under its id (resumeRun), from its recorded
// history; its deadline still counts from the request.

// noteWaiting follows a run's host requests and their answers as load
// reads them: the last request left unanswered is what the run waits for.
func (rec *clientRecord) noteWaiting(o *proto.Object) {
	switch o.Str("type") {
	case proto.FrameApprovalRequest, proto.FrameQuestion:
		rec.waiting = o
	default:
		if rec.waiting != nil && rec.waiting.Str("id") == o.Str("id") {
			rec.waiting = nil
		}
	}
}

// keepWaiting puts back in the waiting room the call an unfinished run
// was waiting for when the server stopped; false when it did not wait (or
// cannot wait again: it is then closed as interrupted).
func (s *sess) keepWaiting(rec *clientRecord) bool {
	w := rec.waiting
	if w == nil || rec.start.Has("parent") {
		// A child run cannot wait across a restart (SPEC 18): nothing
		// follows it any more (its parent's context/child/ files and
		// cancel), and it would go on with its own definition, not the
		// one its parent attenuated (its own tools, approval auto where
		// its parent asked). It is interrupted, as its parent's files say.
		return false
	}
	if _, ok := s.e.waiting.Waiting(rec.run); ok {
		return true // kept when the session was loaded before
	}
	// Only a run the server drives itself can go on from its history: a
	// model's loop, a restore. A CLI's process died with the server, and
	// its permission prompt with it: that run is interrupted.
	defn, err := s.e.definition(s.ref.Container)
	if err != nil || !(defn.AnsweredByAPI() || rec.start.Str("op") == proto.OpRestore) {
		return false
	}
	call := waitingCall(s.ref, rec, w)
	err = s.e.waiting.Add(call, defn.ApprovalTimeout, func(c waiting.Call, a waiting.Answer) (*proto.Object, error) {
		return s.e.resumeRun(s.ref, rec, c, a)
	})
	if err != nil {
		s.e.cfg.Log.Warn("waiting run not kept", s.logAttrs(rec.run, rec.scope, "error", err.Error())...)
		return false
	}
	s.e.running.Keep(rec.run, s.ref.Rel())
	return true
}

// waitingCall is the call a recorded request describes.
func waitingCall(r layout.Ref, rec *clientRecord, w *proto.Object) waiting.Call {
	kind := waiting.KindApproval
	if w.Str("type") == proto.FrameQuestion {
		kind = waiting.KindQuestion
	}
	since, _ := time.Parse(time.RFC3339Nano, w.Str("ts"))
	return waiting.Call{
		Key:   waiting.Key{Run: rec.run, Call: w.Str("id")},
		Place: waiting.Place{Agent: r.Owner, Session: r.Name, Scope: rec.scope, Space: rec.start.Str("space")},
		Owner: requester(rec).Uid, Kind: kind, Name: w.Str("name"), Arguments: json.RawMessage(w.Raw("arguments")),
		Text: w.Str("text"), Since: since,
	}
}

// requester is the uid and gid a run ran as, from its start event.
func requester(rec *clientRecord) layout.Caller {
	var c layout.Caller
	json.Unmarshal(rec.start.Raw("uid"), &c.Uid)
	json.Unmarshal(rec.start.Raw("gid"), &c.Gid)
	return c
}

// resumer is the requester as the answer that resumes its run finds it:
// its uid and gid from the start event (the run goes on as them), and
// the groups the answer came with, which its shared space is checked
// with (locateRef). The answerer is the requester (the waiting room lets
// no other uid answer), and its groups are what the kernel grants it
// now: a send's authority comes from its caller's credentials, and so
// does a resume's, from the answer's. Groups recorded at the send would
// let a member removed from the space since go on. A timeout's answer
// has none: a requester who reaches the space by a supplementary group
// alone is then refused, and the run ends done error (closeUnresumable)
// rather than go on with no one's credentials.
func resumer(rec *clientRecord, a waiting.Answer) layout.Caller {
	c := requester(rec)
	c.Groups = a.Groups
	return c
}

// resumeRun continues a dormant run with the answer that came for it: a
// run under the same id, a resumed event, then the agent's loop from the
// recorded history, which takes the answer for its waiting call. It
// returns the recorded answer, for the op that answered. A run that
// cannot go on is closed with an error.
func (e *Engine) resumeRun(r layout.Ref, rec *clientRecord, call waiting.Call, a waiting.Answer) (*proto.Object, error) {
	rn, err := e.restartRun(r, rec, a)
	if err != nil {
		if s, release, lerr := e.lookup(r); lerr == nil {
			s.closeUnresumable(rec, err)
			release()
		}
		return nil, err
	}
	back := make(chan answered, 1)
	rn.host.preset = &presetAnswer{call: call, a: a, reply: back}
	rn.q.Add(proto.NewObject("type", proto.FrameResumed))
	gopool.Go(rn.execute)
	select {
	case got := <-back:
		return got.frame, got.err
	case <-rn.over:
		return nil, abi.Errorf(syscall.EIO, "approve", "the resumed run ended before it took the answer")
	}
}

// restartRun makes a run of this process for a dormant run: as the uid it
// ran as, in its cwd, with the definition as it is now, if the answer a
// may resume it there (resumer).
func (e *Engine) restartRun(r layout.Ref, rec *clientRecord, a waiting.Answer) (*run, error) {
	s, release, err := e.lookup(r)
	if err != nil {
		return nil, err
	}
	defer release()
	s.mu.Lock()
	cur := s.clients[rec.start.Str("client_id")] // the record of the session as loaded now
	s.mu.Unlock()
	if cur == nil || cur.run != rec.run || cur.done != nil {
		return nil, abi.Errorf(syscall.ENOENT, "approve", "run %s is no longer waiting", rec.run)
	}
	rec = cur
	c := resumer(rec, a)
	loc, err := e.locateRef(c, r)
	if err != nil {
		return nil, err
	}
	defn, err := e.definition(r.Container)
	if err != nil {
		return nil, err
	}
	if rec.start.Str("op") == proto.OpRestore {
		d := *defn
		d.Restore = &def.Restore{} // its calls are in its history
		defn = &d
	}
	ticket, err := e.takeRun(c.Uid)
	if err != nil {
		return nil, err
	}
	defer ticket.cancel()
	dir, err := e.resolveCwd(c, loc, rec.cwd)
	if err != nil {
		return nil, err
	}
	rn := e.newRun(s, rec.run, rec.start.Str("client_id"), c, loc, defn, rec.input, rec.cwd, dir, rec)
	rn.register()
	ticket.spend()
	rn.resumed = true
	return rn, nil
}

// closeUnresumable ends a dormant run that cannot go on.
func (s *sess) closeUnresumable(rec *clientRecord, why error) {
	errEv, done := errorEnd(rec.run, abi.Errno(why), "the run could not be resumed: "+why.Error())
	s.endRun(rec, errEv, done)
	s.e.running.End(rec.run)
}

// resumeState is where a resumed run stood, read from the end of its
// session's logs (agent.ResumeOf).
func (s *sess) resumeState(run string) *agent.Resume {
	return agent.ResumeOf(run, s.conversationLog(), s.logTail(s.events))
}
