package session

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/provider"
	"github.com/ctxfs/ctxfs/proto"
)

// maxConversation bounds how much of messages.jsonl a model API run is
// given, from its end: about the largest context windows offered (1M
// tokens), and a run must not make the server hold a whole long history
// (times the quota of runs, this is what a uid can make the server hold).
const maxConversation = 4 << 20

// prompt is a model API run's request (SPEC 10): the merged AGENTS.md
// rules then meta.json's rule as the system prompt, and the session's
// conversation from messages.jsonl, in order.
func (s *sess) prompt(rules string) *provider.Request {
	system := rules
	if rule := s.metaRule(); rule != "" {
		system = strings.TrimLeft(system+"\n\n"+rule, "\n")
	}
	return &provider.Request{System: system, Turns: s.conversation()}
}

// metaRule is meta.json's rule, "" when there is none or it cannot be read.
func (s *sess) metaRule() string {
	if s.rel == "" {
		return ""
	}
	b, err := s.e.root.ReadFile(s.file(abi.FileMeta), maxRulesBytes)
	if err != nil {
		return ""
	}
	obj, err := proto.ParseObject(bytes.TrimSpace(b), false)
	if err != nil {
		return ""
	}
	return obj.Str("rule")
}

// conversation reads the last maxConversation bytes of messages.jsonl as
// turns; a line cut by that bound, or that is not a message, is left out.
func (s *sess) conversation() []provider.Turn {
	size := s.msgs.Size()
	off := max(0, size-maxConversation)
	buf := make([]byte, size-off)
	n, _ := s.msgs.ReadAt(buf, off)
	buf = buf[:n]
	if off > 0 {
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			buf = buf[i+1:]
		}
	}
	var turns []provider.Turn
	for _, line := range bytes.Split(buf, []byte("\n")) {
		if t, ok := turnOf(line); ok {
			turns = append(turns, t)
		}
	}
	return turns
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
		t.Text = messageText(m.Content)
		if m.Role == "assistant" {
			t.ToolCalls = toolCalls(m.Content)
		}
	case "tool":
		var parts []contentPart
		if json.Unmarshal(m.Content, &parts) != nil || len(parts) == 0 {
			return t, false
		}
		p := parts[0]
		t.ToolCallID, t.ToolName, t.IsError, t.Text = p.ToolCallID, m.Name, p.IsError, messageText(p.Content)
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
