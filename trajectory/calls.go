package trajectory

import (
	"bytes"
	"encoding/json"

	"github.com/ctxfs/ctxfs/proto"
)

// assistant opens the agent step of an assistant message, with the tool
// calls the message itself carries.
func (m *mapper) assistant(l *logLine) error {
	rs := m.state(l.run)
	s := newStep(SourceAgent, l.run, l.ts)
	s.Message = l.text
	if err := m.open(s, rs); err != nil {
		return err
	}
	for _, p := range l.parts {
		if p.Type != "tool_call" {
			continue
		}
		id := p.ID
		s.addCall(id, toolCall(p.RawID, p.RawName, p.Arguments))
		if i := rs.pendingIndex(id); i >= 0 { // its frame came first: the same call
			rs.calls = append(rs.calls[:i], rs.calls[i+1:]...)
		}
	}
	return nil
}

// toolCallFrame queues a tool_call frame until its result places it. A call
// the run's current step holds already (its message carried it, and the
// frame repeats it, as in SPEC 6) or one already queued is the same call
// seen twice. Only those are compared: an agent may reuse an id later.
func (m *mapper) toolCallFrame(e *logLine) {
	rs := m.state(e.run)
	if m.cur.isAgentOf(e.run) && m.cur.calls[e.id] || rs.pendingIndex(e.id) >= 0 {
		return
	}
	rs.calls = append(rs.calls, pendingCall{id: e.id, call: toolCall(e.rawID, e.rawName, e.arguments), ts: e.ts})
}

// toolMessage joins each tool result of a role "tool" line to the step that
// holds the call of the same run and id, placing that call first if it was
// waiting. A result with no such call is dropped.
func (m *mapper) toolMessage(l *logLine) error {
	for _, p := range l.parts {
		if p.Type != "tool_result" {
			continue
		}
		id := p.ToolCallID
		if !m.cur.isAgentOf(l.run) || !m.cur.calls[id] {
			rs := m.runs[l.run]
			if rs == nil {
				continue
			}
			i := rs.pendingIndex(id)
			if i < 0 {
				continue // no call of this run with this id within reach
			}
			if err := m.place(l.run, rs, i+1); err != nil {
				return err
			}
		}
		m.cur.addResult(result(id, p))
	}
	return nil
}

// place puts the first n waiting calls of run into the run's current agent
// step, or into a new agent step with an empty message when the current
// step is not the run's.
func (m *mapper) place(run string, rs *runState, n int) error {
	calls := rs.calls[:n:n]
	rs.calls = append([]pendingCall(nil), rs.calls[n:]...)
	if !m.cur.isAgentOf(run) {
		if err := m.open(newStep(SourceAgent, run, calls[0].ts), nil); err != nil {
			return err
		}
	}
	for _, c := range calls {
		m.cur.addCall(c.id, c.call)
	}
	return nil
}

// usage gives a usage frame to the run's current agent step, else keeps it
// for the run's next assistant message; a CLI's thread total counts as the
// part of it the run added (proto.ThreadUsage).
func (m *mapper) usage(e *logLine) {
	u := &usage{model: e.model, prompt: e.prompt, completion: e.completion}
	if e.threadTotal && u.prompt != nil && u.completion != nil {
		in, out := m.thread.Own(*u.prompt, *u.completion, true)
		u.prompt, u.completion = &in, &out
	}
	if m.cur.isAgentOf(e.run) {
		m.cur.addUsage(u)
		return
	}
	rs := m.state(e.run)
	if rs.usage == nil {
		rs.usage = &usage{model: u.model}
	}
	rs.usage.prompt = addPtr(rs.usage.prompt, u.prompt)
	rs.usage.completion = addPtr(rs.usage.completion, u.completion)
}

// endRun places the calls a run left unanswered and forgets the run. Usage
// still waiting goes to the run's current step if there is one; a step is
// never made for usage alone.
func (m *mapper) endRun(run string) error {
	rs := m.runs[run]
	if rs == nil {
		return nil
	}
	if len(rs.calls) > 0 {
		if err := m.place(run, rs, len(rs.calls)); err != nil {
			return err
		}
	}
	if rs.usage != nil && m.cur.isAgentOf(run) {
		m.cur.addUsage(rs.usage)
	}
	delete(m.runs, run)
	for i, r := range m.order {
		if r == run {
			m.order = append(m.order[:i], m.order[i+1:]...)
			break
		}
	}
	return nil
}

// messageText is a message's text by the one rule (proto.ContentText).
// Content that is neither a string nor an array, which has no text, is
// kept as its JSON text rather than lost.
func messageText(raw json.RawMessage) string {
	if proto.HasTextShape(raw) {
		return proto.ContentText(raw)
	}
	return compactJSON(raw)
}

// partsText is messageText of raw whose parts were read already
// (proto.ContentParts): the same text (a string content is its one text
// part), without reading the content again.
func partsText(raw json.RawMessage, parts []proto.Part) string {
	if proto.HasTextShape(raw) {
		return proto.PartsText(parts)
	}
	return compactJSON(raw)
}

// toolCall builds a call from the log's raw id and name (kept as they are,
// so that a call of another type fails validation) and its arguments,
// normalised as everyone reads them (proto.ToolArguments: none are {},
// ATIF: "can be empty"; anything not an object fails validation).
func toolCall(id, name, args json.RawMessage) ToolCall {
	return ToolCall{ToolCallID: id, FunctionName: name, Arguments: proto.ToolArguments(args)}
}

// result is one tool_result part as an observation result: string content
// as it is, other JSON as its text; is_error goes to extra when true.
func result(id string, p proto.Part) Result {
	r := Result{SourceCallID: id}
	if len(p.Content) > 0 && string(p.Content) != "null" {
		c := str(p.Content)
		if p.Content[0] != '"' {
			c = compactJSON(p.Content)
		}
		r.Content = &c
	}
	if p.IsError {
		r.Extra = &ResultExtra{IsError: true}
	}
	return r
}

func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}
