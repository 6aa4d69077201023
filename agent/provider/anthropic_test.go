package provider

import (
	"context"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/agent/modelapi"
	"github.com/ctxfs/ctxfs/proto"
)

func TestAnthropicStreamsTextAndUsage(t *testing.T) {
	t.Parallel()
	rec := streamHello(t, anthropicCase, "/v1/messages")
	keyOnlyIn(t, rec, "X-Api-Key", testKey)
	if v := rec.header.Get("Anthropic-Version"); v != "2023-06-01" {
		t.Errorf("anthropic-version %q", v)
	}
	if v, ok := rec.header["Authorization"]; ok {
		t.Errorf("Authorization %q sent to Anthropic", v)
	}
	sameJSON(t, rec.body, `{
		"model": "test-model",
		"max_tokens": 4096,
		"system": "be brief",
		"stream": true,
		"tools": [
			{"name": "fs_list", "description": "List a directory.",
				"input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
			{"name": "fs_read", "input_schema": {"type": "object", "properties": {}}}
		],
		"messages": [
			{"role": "user", "content": [{"type": "text", "text": "what is in /tmp?"}]},
			{"role": "assistant", "content": [
				{"type": "text", "text": "Let me look.\n\n[tool call fs.read (call call_2)]\n{\"path\":\"/x\"}\n\n[tool call shell.exec (call call_3)]\n{\"argv\":[\"ls\"]}"},
				{"type": "tool_use", "id": "call_1", "name": "fs_list", "input": {"path": "/tmp"}}]},
			{"role": "user", "content": [
				{"type": "tool_result", "tool_use_id": "call_1", "content": "a b"},
				{"type": "text", "text": "[tool result from shell.exec (call call_3)]\na\nb"},
				{"type": "text", "text": "[tool error from rm (call call_9)]\ngone"},
				{"type": "text", "text": "and?"}]},
			{"role": "assistant", "content": [{"type": "text", "text": "done"}]},
			{"role": "user", "content": [{"type": "text", "text": "thanks"}]}
		]}`)
}

func TestAnthropicOptionalFields(t *testing.T) {
	t.Parallel()
	base, reqs := serve(t, streamOf(anthropicCase.stream("ok")...))
	cfg := configFor(modelapi.AnthropicMessages, base)
	cfg.APIKey = ""
	if _, _, err := collect(context.Background(), cfg, hello); err != nil {
		t.Fatal(err)
	}
	rec := <-reqs
	if v, ok := rec.header["X-Api-Key"]; ok {
		t.Errorf("x-api-key %q sent without a key", v)
	}
	sameJSON(t, rec.body, `{"model":"test-model","max_tokens":4096,"stream":true,
		"messages":[{"role":"user","content":[{"type":"text","text":"hello"}]}]}`)

	temp := 0.5
	cfg.MaxTokens, cfg.Temperature = 100, &temp
	if _, _, err := collect(context.Background(), cfg, hello); err != nil {
		t.Fatal(err)
	}
	sameJSON(t, (<-reqs).body, `{"model":"test-model","max_tokens":100,"temperature":0.5,"stream":true,
		"messages":[{"role":"user","content":[{"type":"text","text":"hello"}]}]}`)
}

func TestAnthropicEndpointPath(t *testing.T) {
	t.Parallel()
	for _, suffix := range []string{"", "/", "/v1", "/v1/", "/proxy"} {
		base, reqs := serve(t, streamOf(anthropicCase.stream("ok")...))
		cfg := configFor(modelapi.AnthropicMessages, base)
		cfg.Endpoint = base + suffix
		if _, _, err := collect(context.Background(), cfg, hello); err != nil {
			t.Fatalf("%q: %v", suffix, err)
		}
		want := "/v1/messages"
		if suffix == "/proxy" {
			want = "/proxy/v1/messages"
		}
		if got := (<-reqs).path; got != want {
			t.Errorf("endpoint …%q: path %s, want %s", suffix, got, want)
		}
	}
}

// anthropicJSON renders turns as the messages array.
func anthropicJSON(t *testing.T, turns []modelapi.Turn) string {
	t.Helper()
	p, err := plan(turns, offer(t, "ls", "f", "g"), idChars)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(anMessages(p, true, true))
	return string(b)
}

// The API wants alternating roles starting with the user, no empty text,
// results first in their message, ids of [a-zA-Z0-9_-], and no trailing
// white space at the end of a final assistant message.
func TestAnthropicMessageShape(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		turns []modelapi.Turn
		want  string
	}{
		{"starts with assistant", []modelapi.Turn{{Role: modelapi.RoleAssistant, Text: "hi"}, {Role: modelapi.RoleUser, Text: "yo"}},
			`[{"role":"user","content":[{"type":"text","text":"(continued)"}]},
			  {"role":"assistant","content":[{"type":"text","text":"hi"}]},
			  {"role":"user","content":[{"type":"text","text":"yo"}]}]`},
		{"same roles merge", []modelapi.Turn{{Role: modelapi.RoleUser, Text: "a"}, {Role: modelapi.RoleUser, Text: "b"},
			{Role: modelapi.RoleAssistant, Text: "c"}, {Role: modelapi.RoleAssistant, Text: "d"}, {Role: modelapi.RoleUser, Text: "e"}},
			`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
			  {"role":"assistant","content":[{"type":"text","text":"c"},{"type":"text","text":"d"}]},
			  {"role":"user","content":[{"type":"text","text":"e"}]}]`},
		{"empty text", []modelapi.Turn{{Role: modelapi.RoleUser, Text: ""}},
			`[{"role":"user","content":[{"type":"text","text":"(empty)"}]}]`},
		{"final assistant trimmed", []modelapi.Turn{{Role: modelapi.RoleUser, Text: "q"}, {Role: modelapi.RoleAssistant, Text: "partial \n"}},
			`[{"role":"user","content":[{"type":"text","text":"q"}]},
			  {"role":"assistant","content":[{"type":"text","text":"partial"}]}]`},
		{"blank final assistant dropped", []modelapi.Turn{{Role: modelapi.RoleUser, Text: "q"}, {Role: modelapi.RoleAssistant, Text: "  "}},
			`[{"role":"user","content":[{"type":"text","text":"q"}]}]`},
		{"id with a dot is text", []modelapi.Turn{{Role: modelapi.RoleUser, Text: "q"},
			{Role: modelapi.RoleAssistant, ToolCalls: []modelapi.ToolCall{{ID: "call.1", Name: "ls", Arguments: "{}"}}},
			{Role: modelapi.RoleTool, ToolCallID: "call.1", ToolName: "ls", Text: "x"}},
			`[{"role":"user","content":[{"type":"text","text":"q"}]},
			  {"role":"assistant","content":[{"type":"text","text":"[tool call ls (call call.1)]\n{}"}]},
			  {"role":"user","content":[{"type":"text","text":"[tool result from ls (call call.1)]\nx"}]}]`},
		{"results first", []modelapi.Turn{{Role: modelapi.RoleUser, Text: "q"},
			{Role: modelapi.RoleAssistant, ToolCalls: []modelapi.ToolCall{{ID: "a", Name: "f"}, {ID: "b", Name: "g"}}},
			{Role: modelapi.RoleTool, ToolCallID: "a", Text: "1"},
			{Role: modelapi.RoleTool, ToolCallID: "zz", Text: "loose"},
			{Role: modelapi.RoleTool, ToolCallID: "b", Text: "2", IsError: true}},
			`[{"role":"user","content":[{"type":"text","text":"q"}]},
			  {"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":{}},{"type":"tool_use","id":"b","name":"g","input":{}}]},
			  {"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"1"},
			    {"type":"tool_result","tool_use_id":"b","content":"2","is_error":true},
			    {"type":"text","text":"[tool result from a tool (call zz)]\nloose"}]}]`},
	}
	for _, c := range cases {
		got := anthropicJSON(t, c.turns)
		var g, w any
		json.Unmarshal([]byte(got), &g)
		if err := json.Unmarshal([]byte(c.want), &w); err != nil {
			t.Fatalf("%s: want: %v", c.name, err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, strings.Join(strings.Fields(c.want), " "))
		}
	}
}

// Cached input tokens count as input; the last output count wins.
func TestAnthropicUsageWithCache(t *testing.T) {
	t.Parallel()
	base, _ := serve(t, streamOf(
		anEventText("message_start", map[string]any{"type": "message_start", "message": map[string]any{
			"usage": map[string]any{"input_tokens": 5, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20, "output_tokens": 1}}}),
		anTextEvent("x"),
		anEventText("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "max_tokens"},
			"usage": map[string]any{"output_tokens": 42}}),
		anEventText("message_stop", map[string]any{"type": "message_stop"})))
	_, res, err := collect(context.Background(), configFor(modelapi.AnthropicMessages, base), hello)
	if err != nil {
		t.Fatal(err)
	}
	if want := (modelapi.Result{Text: "x", InputTokens: 125, OutputTokens: 42, StopReason: "max_tokens"}); !reflect.DeepEqual(res, want) {
		t.Errorf("result %+v, want %+v", res, want)
	}
}

// Counts a hostile provider makes huge are clamped to proto.MaxTokens, and
// their sum does not wrap (a negative sum was dropped, a huge one kept).
func TestAnthropicUsageClamped(t *testing.T) {
	t.Parallel()
	const huge = math.MaxInt64
	base, _ := serve(t, streamOf(
		anEventText("message_start", map[string]any{"type": "message_start", "message": map[string]any{
			"usage": map[string]any{"input_tokens": huge, "cache_read_input_tokens": huge, "cache_creation_input_tokens": 2, "output_tokens": -5}}}),
		anTextEvent("x"),
		anEventText("message_delta", map[string]any{"type": "message_delta", "usage": map[string]any{"output_tokens": huge}}),
		anEventText("message_stop", map[string]any{"type": "message_stop"})))
	_, res, err := collect(context.Background(), configFor(modelapi.AnthropicMessages, base), hello)
	if err != nil {
		t.Fatal(err)
	}
	if res.InputTokens != proto.MaxTokens || res.OutputTokens != proto.MaxTokens {
		t.Errorf("usage %d in, %d out; want both %d", res.InputTokens, res.OutputTokens, proto.MaxTokens)
	}
}
