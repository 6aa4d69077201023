package agent

import (
	"bytes"
	"encoding/json"

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

// messageLineJSON is a messages.jsonl line as the engine records it.
type messageLineJSON struct {
	Role    string          `json:"role"`
	Name    string          `json:"name"`
	Content json.RawMessage `json:"content"`
}

// contentPart is one part of a content array: text, a tool call (as a
// jsonl agent may record it, "tool_call" or "tool_use"), or a tool result.
type contentPart struct {
	Type       string          `json:"type"`
	Text       string          `json:"text"`
	ID         string          `json:"id"`
	Name       string          `json:"name"`
	Arguments  json.RawMessage `json:"arguments"`
	Input      json.RawMessage `json:"input"`
	ToolCallID string          `json:"tool_call_id"`
	Content    json.RawMessage `json:"content"`
	IsError    bool            `json:"is_error"`
}

// turnOf reads one line as a turn of the conversation.
func turnOf(line []byte) (provider.Turn, bool) {
	var m messageLineJSON
	if len(bytes.TrimSpace(line)) == 0 || json.Unmarshal(line, &m) != nil {
		return provider.Turn{}, false
	}
	t := provider.Turn{Role: m.Role}
	switch m.Role {
	case "user", "assistant":
		t.Text = proto.ContentText(m.Content)
		if m.Role == "assistant" {
			t.ToolCalls = toolCalls(m.Content)
		}
	case "tool":
		var parts []contentPart
		if json.Unmarshal(m.Content, &parts) != nil || len(parts) == 0 {
			return t, false
		}
		p := parts[0]
		t.ToolCallID, t.ToolName, t.IsError, t.Text = p.ToolCallID, m.Name, p.IsError, proto.ContentText(p.Content)
	default:
		return t, false
	}
	return t, t.Text != "" || len(t.ToolCalls) > 0 || t.ToolCallID != ""
}

// toolCalls are the tool calls among an assistant message's parts.
func toolCalls(content json.RawMessage) []provider.ToolCall {
	var parts []contentPart
	if json.Unmarshal(content, &parts) != nil {
		return nil
	}
	var calls []provider.ToolCall
	for _, p := range parts {
		if (p.Type == "tool_call" || p.Type == "tool_use") && p.ID != "" && p.Name != "" {
			args := p.Arguments
			if args == nil {
				args = p.Input
			}
			var s string
			if json.Unmarshal(args, &s) == nil { // arguments given as a JSON string
				args = json.RawMessage(s)
			}
			calls = append(calls, provider.ToolCall{ID: p.ID, Name: p.Name, Arguments: string(args)})
		}
	}
	return calls
}
