package session

import (
	"context"
	"encoding/json"
	"reflect"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent"
	"github.com/ctxfs/ctxfs/agent/provider"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/children"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/reply"
	"github.com/ctxfs/ctxfs/session/waiting"
)

// toolHost is the engine's side of a model run's tools (agent.ToolHost,
// SPEC 17): it records the host-owned facts (approval_request,
// approval_result, question, answer) and waits in the server's waiting
// room (session/waiting) for a person's answer.
type toolHost struct {
	rn *run
	// preset is the answer that resumed a dormant run (resumeRun): the
	// run's first wait takes it instead of asking again.
	preset *presetAnswer
}

type presetAnswer struct {
	call  waiting.Call
	a     waiting.Answer
	reply chan<- answered
}

// answers says why the call a resumed run waits for first is not the one
// its answer was given for, or nil. The answer was given for the call as
// its recorded request (approval_request or question, which the server
// alone writes) showed it; the run's first wait must be for that call,
// its id, and its tool and arguments or its question, else the answer
// would let another call run (the run's history said other than its
// request: EIO, and the run ends).
func (p *presetAnswer) answers(call waiting.Call, id string) error {
	shown := p.call
	same := shown.Call == id && shown.Kind == call.Kind
	switch {
	case !same:
	case call.Kind == waiting.KindApproval:
		same = shown.Name == call.Name && sameJSON(shown.Arguments, call.Arguments)
	default:
		same = shown.Text == call.Text
	}
	if !same {
		return abi.Errorf(syscall.EIO, "approve", "the resumed run waits for call %s (%s), not for the call %s (%s) that was answered", id, call.Name, shown.Call, shown.Name)
	}
	return nil
}

// sameJSON says whether two JSON texts hold the same value: one call's
// arguments may be written with "&" in one record and "\u0026" in
// another (encoding/json's escaping of HTML, proto.Object.Set).
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// answered is what the op that answered gets back: the recorded frame.
type answered struct {
	frame *proto.Object
	err   error
}

// delivery is an answer on its way from the op (or the timeout) to the
// waiting run, with the way back for the recorded frame.
type delivery struct {
	a     waiting.Answer
	reply chan<- answered
}

// Approve records the call's approval_request, waits for the decision and
// records it (approval_result). A stop cancels the run: done cancelled.
func (h *toolHost) Approve(ctx context.Context, c agent.ToolCall) (string, string) {
	args := provider.ArgsObject(c.Arguments)
	req := proto.NewObject("type", proto.FrameApprovalRequest, "id", c.ID, "name", c.Name, "arguments", args)
	d, ok := h.wait(ctx, waiting.Call{Kind: waiting.KindApproval, Name: c.Name, Arguments: args}, c.ID, req)
	if !ok {
		return proto.DecisionStop, ""
	}
	res := proto.NewObject("type", proto.FrameApprovalResult, "id", c.ID, "name", c.Name, "decision", d.a.Decision, "uid", d.a.Uid)
	if d.a.Reason != "" {
		res.Set("reason", d.a.Reason)
	}
	if !h.record(res, d) {
		return proto.DecisionStop, ""
	}
	if d.a.Decision == proto.DecisionStop {
		h.rn.cancelRun()
	}
	return d.a.Decision, d.a.Reason
}

// Ask records an ask_user question, waits for the answer and records it.
func (h *toolHost) Ask(ctx context.Context, c agent.ToolCall, text string) (string, error) {
	q := proto.NewObject("type", proto.FrameQuestion, "id", c.ID, "text", text)
	d, ok := h.wait(ctx, waiting.Call{Kind: waiting.KindQuestion, Name: c.Name, Text: text}, c.ID, q)
	if !ok {
		return "", abi.Errorf(syscall.ECANCELED, "ask_user", "the run ended while the question waited")
	}
	ans := proto.NewObject("type", proto.FrameAnswer, "id", c.ID, "uid", d.a.Uid, "text", d.a.Text)
	if d.a.Timeout {
		ans.Set("reason", waiting.ReasonTimeout)
	}
	if !h.record(ans, d) {
		return "", abi.Errorf(syscall.EIO, "ask_user", "the answer could not be recorded")
	}
	if d.a.Timeout {
		return "", abi.Errorf(syscall.ETIMEDOUT, "ask_user", "no one answered within %s", h.rn.spec.Def.ApprovalTimeout)
	}
	return d.a.Text, nil
}

// record records an answer's frame and hands it to the op that answered.
func (h *toolHost) record(f *proto.Object, d delivery) bool {
	fr, err := h.rn.recordWait(f)
	if d.reply != nil {
		d.reply <- answered{fr, err}
	}
	return err == nil
}

// wait puts the call in the waiting room, records the request frame
// (durable before anyone can see it), and waits for its answer; false when
// the waiting room refuses it or the run ends first.
func (h *toolHost) wait(ctx context.Context, call waiting.Call, id string, req *proto.Object) (delivery, bool) {
	rn := h.rn
	if p := h.preset; p != nil {
		h.preset = nil
		if err := p.answers(call, id); err != nil {
			rn.q.Add(proto.ErrorFrame(err))
			p.reply <- answered{nil, err}
			return delivery{}, false
		}
		return delivery{p.a, p.reply}, true
	}
	call.Key = waiting.Key{Run: rn.id, Call: id}
	call.Place, call.Owner, call.Since = rn.place(), rn.caller, time.Now()
	got := make(chan delivery, 1)
	deliver := func(_ waiting.Call, a waiting.Answer) (*proto.Object, error) {
		back := make(chan answered, 1)
		got <- delivery{a, back}
		select {
		case r := <-back:
			return r.frame, r.err
		case <-rn.ctx.Done():
			return nil, abi.Errorf(syscall.ECANCELED, "approve", "the run ended before the answer was recorded")
		}
	}
	// In the waiting room first (a refusal, EAGAIN, records nothing), then
	// recorded: an answer that comes before the request is durable waits
	// in got until it is.
	if err := rn.s.e.waiting.Add(call, rn.spec.Def.ApprovalTimeout, deliver); err != nil {
		rn.q.Add(proto.ErrorFrame(err))
		return delivery{}, false
	}
	rn.setPhase(call.Kind)
	defer rn.setPhase(phaseRunning)
	if _, err := rn.recordWait(req); err != nil {
		rn.s.e.waiting.Remove(rn.id)
		return delivery{}, false
	}
	rn.s.e.running.Sync() // a reboot finds the waiting run (package runsfile)
	select {
	case d := <-got:
		return d, true
	case <-ctx.Done():
		rn.s.e.waiting.Remove(rn.id)
		return delivery{}, false
	}
}

// place names the run's session in the waiting room.
func (rn *run) place() waiting.Place {
	return waiting.Place{Agent: rn.s.ref.Owner, Session: rn.s.ref.Name, Scope: rn.spec.Scope, Space: rn.rec.start.Str("space")}
}

// Keep keeps a file's earlier content in the session's versions before a
// tool changes it.
func (h *toolHost) Keep(c agent.ToolCall, before agent.FileBefore) error {
	return h.rn.s.keepVersion(h.rn.id, c, before)
}

// Create starts a child run as the run's uid (agent.create, SPEC 18): the
// children package keeps its books and its files in this session's
// context/child/.
func (h *toolHost) Create(_ context.Context, _ agent.ToolCall, req agent.CreateRequest) (*proto.Object, error) {
	rn, e := h.rn, h.rn.s.e
	c := layout.Caller{Uid: rn.spec.Uid, Gid: rn.spec.Gid}
	if rn.spec.Scope == abi.ScopeShared { // its uid is its caller's: a member by a supplementary group is one still
		c.Groups = rn.groups
	}
	p := children.Parent{Run: rn.id, Def: rn.spec.Def, IsChild: rn.rec.start.Has("parent"), Scope: rn.spec.Scope, Space: rn.rec.start.Str("space"), Record: rn.q.Add,
		Start: func(name string, r *proto.Request) (*reply.Reply, error) {
			return e.Begin(context.Background(), c, Target{Kind: abi.KindAgent, Owner: name}, r)
		}}
	p.Files = e.childFiles(rn.s.rel, c)
	return e.kids.Create(p, req)
}

// childFiles is context/child/ of the session directory rel, written as
// c; nil for none (a temp session).
func (e *Engine) childFiles(rel string, c layout.Caller) *children.Files {
	if rel == "" {
		return nil
	}
	return &children.Files{Tree: e.FreeTree(), Caller: c, Session: rel, Changed: e.changed}
}

// cancelChild cancels a child run whose parent ended, recording why in
// the child's events first; false when it no longer runs.
func (e *Engine) cancelChild(run, reason string) bool {
	e.mu.Lock()
	rn := e.runs[run]
	e.mu.Unlock()
	if rn == nil {
		return false
	}
	rn.q.Add(proto.NewObject("type", children.FrameCancel, "reason", reason))
	rn.cancelRun()
	return true
}

// Phases of a run as status shows them (SPEC 7, 17); a run waiting for a
// person shows the kind of its call: waiting.KindApproval or KindQuestion.
const (
	phaseQueued  = "queued"
	phaseRunning = "running"
)

func (rn *run) setPhase(p string) {
	rn.mu.Lock()
	rn.phase = p
	rn.mu.Unlock()
}
