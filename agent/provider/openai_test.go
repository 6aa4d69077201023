package provider

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/agent/modelapi"
	"github.com/ctxfs/ctxfs/proto"
)

// toolRequest offers two tools and has every kind of turn: a paired call
// of an offered tool, a call never answered, a paired call of a tool not
// offered (text, with its result), a result whose call is unknown, and
// plain text both ways.
var toolRequest = modelapi.Request{
	System: "be brief",
	Turns: []modelapi.Turn{
		{Role: modelapi.RoleUser, Text: "what is in /tmp?"},
		{Role: modelapi.RoleAssistant, Text: "Let me look.", ToolCalls: []modelapi.ToolCall{
			{ID: "call_1", Name: "fs.list", Arguments: `{"path":"/tmp"}`},
			{ID: "call_2", Name: "fs.read", Arguments: `{"path":"/x"}`},      // never answered
			{ID: "call_3", Name: "shell.exec", Arguments: `{"argv":["ls"]}`}, // not offered
		}},
		{Role: modelapi.RoleTool, ToolCallID: "call_1", ToolName: "fs.list", Text: "a b"},
		{Role: modelapi.RoleTool, ToolCallID: "call_3", ToolName: "shell.exec", Text: "a\nb"},
		{Role: modelapi.RoleTool, ToolCallID: "call_9", ToolName: "rm", Text: "gone", IsError: true}, // answers nothing
		{Role: modelapi.RoleUser, Text: "and?"},
		{Role: modelapi.RoleAssistant, Text: "done"},
		{Role: modelapi.RoleUser, Text: "thanks"},
	},
	Tools: []modelapi.Tool{
		{Name: "fs.list", Description: "List a directory.", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)},
		{Name: "fs.read"}, // no description, no parameters
	},
}

// sameJSON fails unless got and want are equal as JSON values.
func sameJSON(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("body %s: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want %s: %v", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("body\n%s\nwant\n%s", got, want)
	}
}

// keyOnlyIn fails unless the key appears in the request in header name
// with exactly the value want, and nowhere else: not in the URL, the
// body or any other header.
func keyOnlyIn(t *testing.T, rec recorded, name, want string) {
	t.Helper()
	if got := rec.header.Get(name); got != want {
		t.Errorf("%s: %q, want %q", name, got, want)
	}
	if strings.Contains(rec.path+"?"+rec.rawQuery, testKey) {
		t.Errorf("the key is in the URL %s?%s", rec.path, rec.rawQuery)
	}
	if strings.Contains(string(rec.body), testKey) {
		t.Errorf("the key is in the body")
	}
	for h, vs := range rec.header {
		if http.CanonicalHeaderKey(h) == http.CanonicalHeaderKey(name) {
			continue
		}
		if strings.Contains(strings.Join(vs, "\n"), testKey) {
			t.Errorf("the key is in header %s", h)
		}
	}
}

func TestOpenAIStreamsTextAndUsage(t *testing.T) {
	t.Parallel()
	rec := streamHello(t, openAICase, "/v1/chat/completions")
	keyOnlyIn(t, rec, "Authorization", "Bearer "+testKey)
	sameJSON(t, rec.body, `{
		"model": "test-model",
		"stream": true,
		"stream_options": {"include_usage": true},
		"tools": [
			{"type": "function", "function": {"name": "fs_list", "description": "List a directory.",
				"parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
			{"type": "function", "function": {"name": "fs_read", "parameters": {"type": "object", "properties": {}}}}
		],
		"messages": [
			{"role": "system", "content": "be brief"},
			{"role": "user", "content": "what is in /tmp?"},
			{"role": "assistant", "content": "Let me look.\n\n[tool call fs.read (call call_2)]\n{\"path\":\"/x\"}\n\n[tool call shell.exec (call call_3)]\n{\"argv\":[\"ls\"]}",
			 "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "fs_list", "arguments": "{\"path\":\"/tmp\"}"}}]},
			{"role": "tool", "tool_call_id": "call_1", "content": "a b"},
			{"role": "user", "content": "[tool result from shell.exec (call call_3)]\na\nb"},
			{"role": "user", "content": "[tool error from rm (call call_9)]\ngone"},
			{"role": "user", "content": "and?"},
			{"role": "assistant", "content": "done"},
			{"role": "user", "content": "thanks"}
		]}`)
}

func TestOpenAIOptionalFields(t *testing.T) {
	t.Parallel()
	base, reqs := serve(t, streamOf(openAICase.stream("ok")...))
	cfg := configFor(modelapi.OpenAIChat, base)
	cfg.APIKey = ""
	if _, _, err := collect(context.Background(), cfg, hello); err != nil {
		t.Fatal(err)
	}
	rec := <-reqs
	if v, ok := rec.header["Authorization"]; ok {
		t.Errorf("Authorization %q sent without a key", v)
	}
	sameJSON(t, rec.body, `{"model":"test-model","stream":true,"stream_options":{"include_usage":true},
		"messages":[{"role":"user","content":"hello"}]}`)

	temp := 0.0 // zero is a value, not an absence
	cfg.MaxTokens, cfg.Temperature = 100, &temp
	if _, _, err := collect(context.Background(), cfg, modelapi.Request{System: "", Turns: hello.Turns}); err != nil {
		t.Fatal(err)
	}
	sameJSON(t, (<-reqs).body, `{"model":"test-model","stream":true,"stream_options":{"include_usage":true},
		"max_tokens":100,"temperature":0,"messages":[{"role":"user","content":"hello"}]}`)
}

// An assistant turn that is all tool calls has no content, as OpenAI
// documents; an empty tool result still has one.
func TestOpenAIToolOnlyAssistant(t *testing.T) {
	t.Parallel()
	turns, err := plan([]modelapi.Turn{
		{Role: modelapi.RoleUser, Text: "go"},
		{Role: modelapi.RoleAssistant, ToolCalls: []modelapi.ToolCall{{ID: "c1", Name: "run"}}},
		{Role: modelapi.RoleTool, ToolCallID: "c1"},
	}, offer(t, "run"), func(id string) bool { return id != "" })
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(oaMessages("", turns))
	sameJSON(t, b, `[{"role":"user","content":"go"},
		{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"run","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"c1","content":""}]`)
}

func TestOpenAIEndpointPath(t *testing.T) {
	t.Parallel()
	for _, suffix := range []string{"/v1", "/v1/", "/openai/v1"} {
		base, reqs := serve(t, streamOf(openAICase.stream("ok")...))
		cfg := configFor(modelapi.OpenAIChat, base)
		cfg.Endpoint = base + suffix
		if _, _, err := collect(context.Background(), cfg, hello); err != nil {
			t.Fatalf("%s: %v", suffix, err)
		}
		want := strings.TrimSuffix(suffix, "/") + "/chat/completions"
		if got := (<-reqs).path; got != want {
			t.Errorf("endpoint …%s: path %s, want %s", suffix, got, want)
		}
	}
}

// A stream that ends with [DONE] but carries no usage (servers that ignore
// include_usage) is complete, with zero counts.
func TestOpenAINoUsage(t *testing.T) {
	t.Parallel()
	base, _ := serve(t, streamOf(openAICase.text("a"), openAICase.text("b"), "data: [DONE]\n\n"))
	_, res, err := collect(context.Background(), configFor(modelapi.OpenAIChat, base), hello)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res, modelapi.Result{Text: "ab"}) {
		t.Errorf("result %+v", res)
	}
}

// Counts a hostile provider reports are clamped to [0, proto.MaxTokens].
func TestOpenAIUsageClamped(t *testing.T) {
	t.Parallel()
	base, _ := serve(t, streamOf(openAICase.text("a"),
		oaChunkEvent(map[string]any{}, nil, map[string]any{"prompt_tokens": math.MaxInt64, "completion_tokens": -3}),
		"data: [DONE]\n\n"))
	_, res, err := collect(context.Background(), configFor(modelapi.OpenAIChat, base), hello)
	if err != nil {
		t.Fatal(err)
	}
	if res.InputTokens != proto.MaxTokens || res.OutputTokens != 0 {
		t.Errorf("usage %d in, %d out; want %d and 0", res.InputTokens, res.OutputTokens, proto.MaxTokens)
	}
}
