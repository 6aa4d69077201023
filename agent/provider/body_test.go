package provider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/agent/modelapi"
)

// asMarshal is v as json.Marshal writes it without HTML escaping: what
// the hand-written bodies must be byte for byte.
func asMarshal(t testing.TB, v any) ([]byte, error) {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// sameBodies checks that both APIs write req's body as json.Marshal writes
// their request structs.
func sameBodies(t testing.TB, cfg modelapi.Config, req modelapi.Request, tools offered) {
	t.Helper()
	oa, err := openAI{}.request(cfg, req, tools)
	if err != nil {
		return // plan refuses it; body does the same before writing
	}
	an, _ := anthropic{}.request(cfg, req, tools)
	for _, c := range []struct {
		name string
		v    any
		body func(int) ([]byte, error)
	}{{"openai", oa, oa.marshal}, {"anthropic", an, an.marshal}} {
		want, wantErr := asMarshal(t, c.v)
		got, gotErr := c.body(0)
		if (wantErr == nil) != (gotErr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("%s: written\n%s (%v)\njson.Marshal\n%s (%v)", c.name, got, gotErr, want, wantErr)
		}
	}
}

// bodyCases are requests of every shape the bodies have: empty and
// missing fields, calls paired and loose, results and errors, tools with
// and without schemas, texts that need escaping, a temperature.
func bodyCases() []struct {
	cfg   modelapi.Config
	req   modelapi.Request
	tools []modelapi.Tool
} {
	zero, warm, tiny := 0.0, 0.7, 1e-7
	odd := "a \"quote\" \\ <html> & \x00\x1f\b\f\n\r\t \u2028\u2029 é 日本 \xff\xfe end"
	calls := []modelapi.Turn{
		{Role: modelapi.RoleUser, Text: "read it"},
		{Role: modelapi.RoleAssistant, Text: "", ToolCalls: []modelapi.ToolCall{{ID: "c1", Name: "fs.read", Arguments: `{ "path" : "a" }`}, {ID: "c2", Name: "gone", Arguments: "not json"}}},
		{Role: modelapi.RoleTool, ToolCallID: "c1", ToolName: "fs.read", Text: odd},
		{Role: modelapi.RoleTool, ToolCallID: "c2", Text: "x", IsError: true},
		{Role: modelapi.RoleTool, ToolCallID: "nobody", Text: ""},
		{Role: modelapi.RoleAssistant, Text: "done  \n"},
	}
	schema := json.RawMessage(`{ "type": "object",
		"properties": {"path": {"type": "string", "description": "<a & b>"}} }`)
	return []struct {
		cfg   modelapi.Config
		req   modelapi.Request
		tools []modelapi.Tool
	}{
		{modelapi.Config{ModelID: "gpt-4o"}, hello, nil},
		{modelapi.Config{ModelID: "o3", MaxTokens: 10, Temperature: &zero}, modelapi.Request{System: odd, Turns: []modelapi.Turn{{Role: modelapi.RoleUser, Text: odd}}}, nil},
		{modelapi.Config{ModelID: odd, MaxTokens: 5, Temperature: &warm}, modelapi.Request{Turns: []modelapi.Turn{{Role: modelapi.RoleAssistant, Text: "first"}, {Role: modelapi.RoleUser}}}, nil},
		{modelapi.Config{Temperature: &tiny}, modelapi.Request{Turns: calls}, []modelapi.Tool{{Name: "fs.read", Description: odd, Parameters: schema}, {Name: "shell.exec"}}},
		{modelapi.Config{ModelID: "m"}, modelapi.Request{System: "s", Turns: calls}, nil},
		{modelapi.Config{ModelID: "m"}, longRequest(50), []modelapi.Tool{{Name: "ask_user"}}},
	}
}

// TestBodyAsMarshal: each request body is written byte for byte as
// json.Marshal writes its struct (without HTML escaping), so the
// hand-written bodies say exactly what the structs' tags describe.
func TestBodyAsMarshal(t *testing.T) {
	for i, c := range bodyCases() {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			o, err := newOffered(c.tools)
			if err != nil {
				t.Fatal(err)
			}
			sameBodies(t, c.cfg, c.req, o)
		})
	}
}

// TestBodyRawNotJSON: a tool's parameters that are not JSON fail the body,
// as they failed json.Marshal.
func TestBodyRawNotJSON(t *testing.T) {
	tools := offered{tools: []modelapi.Tool{{Name: "t", Parameters: json.RawMessage(`{"a":`)}}}
	for _, w := range []wire{openAI{}, anthropic{}} {
		if b, err := w.body(modelapi.Config{}, hello, tools); err == nil {
			t.Fatalf("%T: body %s from parameters that are not JSON", w, b)
		}
	}
}

// FuzzBody: any texts in a conversation with calls, results and a tool
// give the bodies json.Marshal gives.
func FuzzBody(f *testing.F) {
	f.Add("hello", "fs.read", `{"path":"a"}`, "result", "<b>&\u2028\xff")
	f.Add("", "", "", "", "")
	f.Fuzz(func(t *testing.T, text, name, args, result, schema string) {
		req := modelapi.Request{System: text, Turns: []modelapi.Turn{
			{Role: modelapi.RoleUser, Text: text},
			{Role: modelapi.RoleAssistant, Text: result, ToolCalls: []modelapi.ToolCall{{ID: "c1", Name: name, Arguments: args}, {ID: text, Name: "t", Arguments: args}}},
			{Role: modelapi.RoleTool, ToolCallID: "c1", ToolName: name, Text: result},
			{Role: modelapi.RoleTool, ToolCallID: text, Text: text, IsError: true},
			{Role: modelapi.RoleAssistant, Text: text},
		}}
		tools := []modelapi.Tool{{Name: "t", Description: text}}
		if nameOK(strings.ReplaceAll(name, ".", "_")) && name != "t" {
			tools = append(tools, modelapi.Tool{Name: name, Parameters: json.RawMessage(schema)})
		}
		o, err := newOffered(tools)
		if err != nil {
			o, _ = newOffered(tools[:1])
		}
		sameBodies(t, modelapi.Config{ModelID: text}, req, o)
	})
}

// longRequest is a conversation of n turns, users and assistants in turn.
func longRequest(n int) modelapi.Request {
	req := modelapi.Request{System: "Answer briefly.", Owner: testOwner}
	for i := range n {
		role := []string{modelapi.RoleUser, modelapi.RoleAssistant}[i%2]
		req.Turns = append(req.Turns, modelapi.Turn{Role: role, Text: fmt.Sprintf("line %d of a long conversation, with some words in it", i)})
	}
	return req
}

// BenchmarkBody: rendering the request body of a 2,000-turn conversation,
// as a long session's every model call does before it is sent. cold: the
// conversation's first body (nothing settled kept, the settled turns
// kept after it); next: the same conversation grown by a pair of turns
// at each call, as a session's next send (up to 100 pairs, then back to
// the start, which is a cold body once in 100).
func BenchmarkBody(b *testing.B) {
	grown := longRequest(2201)
	cfg := modelapi.Config{ModelID: "gpt-4o", MaxTokens: 1000}
	for _, w := range []struct {
		name string
		wire func(*settledMemo) wire
	}{
		{"openai", func(m *settledMemo) wire { return openAI{memo: m} }},
		{"anthropic", func(m *settledMemo) wire { return anthropic{memo: m} }},
	} {
		b.Run(w.name+"/cold", func(b *testing.B) {
			b.ReportAllocs()
			req := modelapi.Request{System: grown.System, Turns: grown.Turns[:2001], Owner: grown.Owner}
			for b.Loop() {
				if _, err := w.wire(&settledMemo{max: 64, maxBytes: 32 << 20}).body(cfg, req, offered{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(w.name+"/next", func(b *testing.B) {
			b.ReportAllocs()
			wire, i := w.wire(&settledMemo{max: 64, maxBytes: 32 << 20}), 0
			for b.Loop() {
				req := modelapi.Request{System: grown.System, Turns: grown.Turns[:2001+2*(i%100)], Owner: grown.Owner}
				if _, err := wire.body(cfg, req, offered{}); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
