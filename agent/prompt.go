package agent

import (
	"bytes"

	"github.com/ctxfs/ctxfs/agent/provider"
	"github.com/ctxfs/ctxfs/proto"
)

// Prompt is a model API run's request: what the engine hands a run
// (Spec.Prompt), so that the engine needs no provider of its own.
type Prompt = provider.Request

// NewPrompt is a model API run's request (SPEC 10): system as the system
// prompt, and the messages of log (the end of a session's messages.jsonl,
// whole lines) as the conversation, in order; a line that is not a
// message is left out.
func NewPrompt(system string, log []byte) *Prompt {
	var turns []provider.Turn
	for _, line := range bytes.Split(log, []byte("\n")) {
		if t, ok := turnOf(line); ok {
			turns = append(turns, t)
		}
	}
	return &provider.Request{System: system, Turns: turns}
}

// turnOf reads one line as a turn of the conversation (proto.Message: the
// one text rule, the one normalisation of tool-call arguments).
func turnOf(line []byte) (provider.Turn, bool) {
	m, err := proto.ParseMessage(line)
	if err != nil {
		return provider.Turn{}, false
	}
	t := provider.Turn{Role: m.Role}
	switch m.Role {
	case "user", "assistant":
		t.Text = m.Text()
		if m.Role == "assistant" {
			t.ToolCalls = toolCalls(m)
		}
	case "tool":
		parts := m.Parts()
		if len(parts) == 0 {
			return t, false
		}
		p := parts[0]
		t.ToolCallID, t.ToolName, t.IsError, t.Text = p.ToolCallID, m.Name, p.IsError, proto.ContentText(p.Content)
	default:
		return t, false
	}
	return t, t.Text != "" || len(t.ToolCalls) > 0 || t.ToolCallID != ""
}

// toolCalls are the tool calls of an assistant message, as the provider
// takes them.
func toolCalls(m proto.Message) []provider.ToolCall {
	var calls []provider.ToolCall
	for _, c := range m.ToolCalls() {
		calls = append(calls, provider.ToolCall{ID: c.ID, Name: c.Name, Arguments: string(c.Arguments)})
	}
	return calls
}
