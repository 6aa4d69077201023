package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/agent/modelapi"
	"github.com/ctxfs/ctxfs/agent/provider"
	"github.com/ctxfs/ctxfs/proto"
)

// runAPI answers a run with the definition's model API (SPEC 10 and 17).
// Each reply streams as delta frames; a reply that calls tools is recorded
// as an assistant message with its calls (a message frame), each call is
// announced (tool_call), decided when the definition asks (ToolHost),
// executed as the session's uid in the agent's isolation, and its result
// recorded (tool_result) and sent back in the next request; the loop ends
// with a reply that calls nothing, whose text the engine records as the
// assistant message, or with ELOOP once the run made Def.Steps calls.
// After a cancel nothing more is emitted: the request is aborted with ctx.
func runAPI(ctx context.Context, s Spec, emit func(*proto.Object)) bool {
	early := s.Early // the first request, sent already (AskEarly): it fitted
	cfg, err := early.config(s)
	if err != nil {
		emit(proto.ErrorFrame(err))
		return false
	}
	l := newToolLoop(s, emit, s.Def.Steps, s.Def.Tools)
	defer l.tools.close()
	l.firstRequest()
	pending := l.resume()
	for {
		if len(pending) > 0 {
			if !l.callAll(ctx, pending) {
				return false
			}
		}
		var res modelapi.Result
		var ok bool
		if early != nil {
			r, err := early.take(ctx, emit)
			res, ok = l.answered(ctx, cfg, r, err)
			early = nil
		} else if ok = l.fit(ctx, cfg); ok {
			res, ok = l.ask(ctx, cfg)
		}
		if !ok {
			return false
		}
		if len(res.ToolCalls) == 0 {
			return true // the deltas are the answer: the engine records them
		}
		l.nameCalls(res.ToolCalls)
		msgs, err := callsMessages(res.Text, res.ToolCalls)
		for _, m := range msgs {
			emit(m)
		}
		if err != nil {
			emit(proto.ErrorFrame(err))
			return false
		}
		l.req.Turns = append(l.req.Turns, modelapi.Turn{Role: modelapi.RoleAssistant, Text: res.Text, ToolCalls: res.ToolCalls})
		pending = res.ToolCalls
	}
}

// toolLoop is one run's state between its calls (a model's, or a
// restore's).
type toolLoop struct {
	s         Spec
	emit      func(*proto.Object)
	req       modelapi.Request
	offer     []string        // the tools the run may call
	maxSteps  int             // the most calls the run may make
	steps     int             // calls made so far in this run
	failed    int             // calls whose result is an error
	allowRun  map[string]bool // tools allowed for the rest of the run (allow_run)
	announced map[string]bool // calls whose tool_call a resumed run recorded already
	used      map[string]bool // the ids of the run's calls so far (nameCalls)
	tools     *toolSession    // the run's tool process; closed when the run ends
	win       *runWindow      // the context window (window_fit.go); nil: none kept
}

func newToolLoop(s Spec, emit func(*proto.Object), maxSteps int, offer []string) *toolLoop {
	return &toolLoop{s: s, emit: emit, offer: offer, maxSteps: maxSteps, allowRun: map[string]bool{}, announced: map[string]bool{}, used: map[string]bool{}, tools: newToolSession(s)}
}

// resume takes where a resumed run stood (Spec.Resume): the calls it still
// has to make, first.
func (l *toolLoop) resume() []ToolCall {
	r := l.s.Resume
	if r == nil {
		return nil
	}
	l.steps = r.Steps
	for name := range r.AllowRun {
		l.allowRun[name] = true
	}
	for id := range r.Announced {
		l.announced[id] = true
	}
	for id := range r.Used {
		l.used[id] = true
	}
	return r.Pending
}

// nameCalls gives every call an id of its own in the run, one a person
// can answer: a provider may send none, and the model's ids are its own
// (proto.ValidCallID bounds them), which it may give again to a later
// call (call_1 in each reply): the approval and the record of each call
// are found by its id, and an answered id is not asked again (EALREADY).
// A replaced id is "ctx-" and the call's number in the run, or the next
// number not used yet.
func (l *toolLoop) nameCalls(calls []ToolCall) {
	for i := range calls {
		if !proto.ValidCallID(calls[i].ID) || l.used[calls[i].ID] {
			for n := l.steps + i + 1; ; n++ {
				if id := fmt.Sprintf("ctx-%d", n); !l.used[id] {
					calls[i].ID = id
					break
				}
			}
		}
		l.used[calls[i].ID] = true
	}
}

// firstRequest is the run's request before its first reply: the
// prompt's, with the definition's tools, and the window it must fit
// (SPEC 18: fit).
func (l *toolLoop) firstRequest() {
	if l.s.Prompt != nil {
		l.req = l.s.Prompt.Request
	}
	l.win = newRunWindow(l.s)
	l.req.Tools = toolSpecs(l.s.Def.Tools)
}

// ask sends the conversation so far and streams the reply.
func (l *toolLoop) ask(ctx context.Context, cfg modelapi.Config) (modelapi.Result, bool) {
	res, err := provider.Stream(ctx, cfg, l.sent(), func(text string) { l.emit(deltaFrame(text)) })
	return l.answered(ctx, cfg, res, err)
}

// answered emits how a request ended: its error, or its usage; false when
// the run must end.
func (l *toolLoop) answered(ctx context.Context, cfg modelapi.Config, res modelapi.Result, err error) (modelapi.Result, bool) {
	switch {
	case ctx.Err() != nil:
		return res, false
	case err != nil:
		l.emit(proto.ErrorFrame(err))
		return res, false
	}
	l.emit(proto.NewObject("type", proto.FrameUsage, "model", l.s.Def.Model, "model_id", cfg.ModelID,
		"input_tokens", res.InputTokens, "output_tokens", res.OutputTokens))
	return res, true
}

// callsMessage is an assistant message with its text and tool calls.
func callsMessage(text string, calls []ToolCall) *proto.Object {
	var parts []*proto.Object
	if text != "" {
		parts = append(parts, proto.NewObject("type", "text", "text", text))
	}
	for _, c := range calls {
		parts = append(parts, proto.NewObject("type", "tool_call", "id", c.ID, "name", c.Name, "arguments", provider.ArgsObject(c.Arguments)))
	}
	return proto.NewObject("type", proto.FrameMessage, "role", "assistant", "content", parts)
}

// stampRoom is more than the recorder adds to a frame's line: its run
// and its time stamp.
const stampRoom = 256

// fitsLine says whether f, once stamped, fits a log line.
func fitsLine(f *proto.Object) bool { return len(f.Line())+stampRoom <= abi.MaxLineBytes }

// callsMessages are the assistant messages that record a reply's text and
// calls: one, or, when that one would be over a log line's bound, the text
// first in messages of its own (abi.SplitText, as the engine records a
// long answer) and then the calls. The logs refuse a batch with a longer
// line whole, and the run went on meanwhile: its calls were made with
// neither them nor the text recorded. Calls that one line cannot hold are
// EFBIG, none of them made (the text's messages are returned all the same).
func callsMessages(text string, calls []ToolCall) ([]*proto.Object, error) {
	if m := callsMessage(text, calls); fitsLine(m) {
		return []*proto.Object{m}, nil
	}
	var out []*proto.Object
	if text != "" {
		for _, piece := range abi.SplitText(text, abi.MaxMessageText) {
			out = append(out, messageFrame(piece))
		}
	}
	if m := callsMessage("", calls); fitsLine(m) {
		return append(out, m), nil
	}
	return out, abi.Errorf(syscall.EFBIG, "run", "the reply's %d tool calls take more than a log line (%d bytes) to record: none was made", len(calls), abi.MaxLineBytes)
}

// callAll makes the calls of one reply in order; false when the run must
// end (the step budget, a stop, a cancel).
func (l *toolLoop) callAll(ctx context.Context, calls []ToolCall) bool {
	for _, c := range calls {
		if l.steps >= l.maxSteps {
			l.emit(proto.ErrorFrame(abi.Errorf(syscall.ELOOP, "run", "the run made %d tool calls, the most its definition allows (steps)", l.maxSteps)))
			return false
		}
		l.steps++
		if !l.announced[c.ID] {
			l.emit(proto.NewObject("type", proto.FrameToolCall, "id", c.ID, "name", c.Name, "arguments", provider.ArgsObject(c.Arguments)))
		}
		content, isErr, ok := l.call(ctx, c)
		if !ok || ctx.Err() != nil {
			return false
		}
		result := resultFrame(c, content, isErr)
		if !fitsLine(result) {
			// The logs would refuse its batch whole, and the run with it.
			content, isErr = toolFailure(abi.Errorf(syscall.EFBIG, c.Name, "the result takes %d bytes, more than a log line (%d) can record", len(result.Line()), abi.MaxLineBytes))
			result = resultFrame(c, content, isErr)
		}
		if isErr {
			l.failed++
		}
		l.emit(result)
		l.req.Turns = append(l.req.Turns, modelapi.Turn{Role: modelapi.RoleTool, ToolCallID: c.ID, ToolName: c.Name, Text: content, IsError: isErr})
	}
	return true
}

// resultFrame is a call's tool_result frame.
func resultFrame(c ToolCall, content string, isErr bool) *proto.Object {
	return proto.NewObject("type", proto.FrameToolResult, "tool_call_id", c.ID, "name", c.Name, "content", content, "is_error", isErr)
}

// call decides and makes one call: its result's text and whether it is an
// error; ok false when the run must end.
func (l *toolLoop) call(ctx context.Context, c ToolCall) (content string, isErr, ok bool) {
	if !l.offered(c.Name) {
		return callFailed(abi.Errorf(syscall.EACCES, c.Name, "the tool %q is not offered to this agent", c.Name))
	}
	if c.Name == ToolAskUser {
		return l.askUser(ctx, c)
	}
	if l.mustAsk(c.Name) {
		decision, reason := l.s.Host.Approve(ctx, c)
		switch decision {
		case proto.DecisionStop:
			return "", false, false
		case proto.DecisionDeny:
			if reason == "" {
				return "denied", true, true
			}
			return "denied: " + reason, true, true
		case proto.DecisionAllowRun:
			l.allowRun[c.Name] = true
		}
	}
	if c.Name == def.ToolAgentCreate {
		return l.create(ctx, c)
	}
	keep := func(b FileBefore) error { return l.s.Host.Keep(c, b) }
	content, isErr = l.tools.exec(ctx, c, keep)
	return content, isErr, true
}

// askUser puts an ask_user call's question to a person and returns the
// answer as its result.
func (l *toolLoop) askUser(ctx context.Context, c ToolCall) (string, bool, bool) {
	var args struct {
		Text     string `json:"text"`
		Question string `json:"question"`
	}
	if json.Unmarshal(provider.ArgsObject(c.Arguments), &args) != nil || args.Text+args.Question == "" {
		return callFailed(abi.Errorf(syscall.EINVAL, c.Name, "ask_user takes {\"text\": the question}"))
	}
	if args.Text == "" {
		args.Text = args.Question
	}
	answer, err := l.s.Host.Ask(ctx, c, args.Text)
	switch {
	case ctx.Err() != nil:
		return "", false, false
	case abi.Errno(err) == syscall.ETIMEDOUT: // no one answered: the model is told
		return callFailed(err)
	case err != nil: // the question could not wait (the engine said why)
		return "", false, false
	}
	return answer, false, true
}

// offered reports whether the run offers the tool.
func (l *toolLoop) offered(name string) bool {
	for _, t := range l.offer {
		if t == name {
			return true
		}
	}
	return false
}

// mustAsk reports whether a call of the tool waits for a person: with
// approval ask, a tool that writes or executes, unless allowed for the
// rest of the run.
func (l *toolLoop) mustAsk(name string) bool {
	if l.s.Def.Approval != def.ApprovalAsk || l.allowRun[name] {
		return false
	}
	c := def.ToolClass(name)
	return c == 'w' || c == 'x'
}

// callFailed is a call's error result, the run going on.
func callFailed(err error) (content string, isErr, ok bool) {
	content, isErr = toolFailure(err)
	return content, isErr, true
}
