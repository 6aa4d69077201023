package provider

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/agent/modelapi"
)

// wireCall is a tool call as a provider streams it: its name as on the
// wire and its arguments cut into pieces.
type wireCall struct {
	id, name string
	pieces   []string
}

// oaCallEvents is an OpenAI reply with text and tool calls, as OpenAI
// streams them: a fragment with the call's index, id and name and empty
// arguments, then one fragment per piece of its arguments.
func oaCallEvents(text string, calls ...wireCall) []string {
	evs := []string{oaChunkEvent(map[string]any{"role": "assistant", "content": nil}, nil, nil)}
	if text != "" {
		evs = append(evs, openAICase.text(text))
	}
	for i, c := range calls {
		evs = append(evs, oaChunkEvent(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": c.id, "type": "function",
			"function": map[string]any{"name": c.name, "arguments": ""}}}}, nil, nil))
		for _, p := range c.pieces {
			evs = append(evs, oaArgsEvent(i, p))
		}
	}
	stop := "tool_calls"
	return append(evs, oaChunkEvent(map[string]any{}, &stop, nil), "data: [DONE]\n\n")
}

// oaArgsEvent is one piece of the arguments of the call at index i.
func oaArgsEvent(i int, piece string) string {
	return oaChunkEvent(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": piece}}}}, nil, nil)
}

// anCallEvents is an Anthropic reply with a text block and tool_use
// blocks, as Anthropic streams them.
func anCallEvents(text string, calls ...wireCall) []string {
	evs := []string{anEventText("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": "msg_1", "type": "message", "role": "assistant", "content": []any{}, "model": "test-model",
		"usage": map[string]any{"input_tokens": 11, "output_tokens": 1}}})}
	block := 0
	if text != "" {
		evs = append(evs,
			anEventText("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}}),
			anTextEvent(text),
			anEventText("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}))
		block++
	}
	for _, c := range calls {
		evs = append(evs, anEventText("content_block_start", map[string]any{"type": "content_block_start", "index": block,
			"content_block": map[string]any{"type": "tool_use", "id": c.id, "name": c.name, "input": map[string]any{}}}))
		for _, p := range c.pieces {
			evs = append(evs, anArgsEvent(block, p))
		}
		evs = append(evs, anEventText("content_block_stop", map[string]any{"type": "content_block_stop", "index": block}))
		block++
	}
	return append(evs,
		anEventText("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "tool_use"},
			"usage": map[string]any{"output_tokens": 7}}),
		anEventText("message_stop", map[string]any{"type": "message_stop"}))
}

// anArgsEvent is one piece of the input of the tool_use block at index.
func anArgsEvent(index int, piece string) string {
	return anEventText("content_block_delta", map[string]any{"type": "content_block_delta", "index": index,
		"delta": map[string]any{"type": "input_json_delta", "partial_json": piece}})
}

// callsFormat is one API's way of streaming tool calls, for the tests
// that run against both.
type callsFormat struct {
	api        string
	events     func(text string, calls ...wireCall) []string
	argsEvent  func(index int, piece string) string
	stopReason string
}

var callsFormats = []callsFormat{
	{modelapi.OpenAIChat, oaCallEvents, oaArgsEvent, "tool_calls"},
	{modelapi.AnthropicMessages, anCallEvents, anArgsEvent, "tool_use"},
}

func forEachCallsFormat(t *testing.T, test func(t *testing.T, f callsFormat)) {
	for _, f := range callsFormats {
		t.Run(f.api, func(t *testing.T) {
			t.Parallel()
			test(t, f)
		})
	}
}

// offeredTools is what the decoding tests offer.
var offeredTools = []modelapi.Tool{{Name: "fs.read"}, {Name: "shell.exec"}, {Name: "ask_user"}}

// Streamed calls are decoded in order, arguments joined from their
// pieces, names mapped back to the offered tools' (a name no tool has is
// kept as the wire spelled it), empty arguments as {}; the text still
// goes to the delta callback.
func TestToolCallsStreamed(t *testing.T) {
	t.Parallel()
	forEachCallsFormat(t, func(t *testing.T, f callsFormat) {
		base, _ := serve(t, streamOf(f.events("Let me look.",
			wireCall{"call_a", "fs_read", []string{`{"pa`, `th":"/et`, `c/hostname"}`}},
			wireCall{"call_b", "shell_exec", []string{`{"argv":`, `["true"]`, `}`}},
			wireCall{"call_c", "ask_user", nil},
			wireCall{"call_d", "rm_rf", []string{`{}`}})...))
		req := hello
		req.Tools = offeredTools
		deltas, res, err := collect(context.Background(), configFor(f.api, base), req)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(deltas, "") != "Let me look." || res.Text != "Let me look." {
			t.Errorf("deltas %q, text %q", deltas, res.Text)
		}
		want := []modelapi.ToolCall{
			{ID: "call_a", Name: "fs.read", Arguments: `{"path":"/etc/hostname"}`},
			{ID: "call_b", Name: "shell.exec", Arguments: `{"argv":["true"]}`},
			{ID: "call_c", Name: "ask_user", Arguments: `{}`},
			{ID: "call_d", Name: "rm_rf", Arguments: `{}`},
		}
		if !reflect.DeepEqual(res.ToolCalls, want) {
			t.Errorf("calls %+v\nwant  %+v", res.ToolCalls, want)
		}
		if res.StopReason != f.stopReason {
			t.Errorf("stop reason %q", res.StopReason)
		}
	})
}

// A provider that echoes the key in a call does not get it out of the
// package.
func TestToolCallsScrubbed(t *testing.T) {
	t.Parallel()
	forEachCallsFormat(t, func(t *testing.T, f callsFormat) {
		half := len(testKey) / 2
		base, _ := serve(t, streamOf(f.events("", wireCall{"id" + testKey, "fs_read" + testKey,
			[]string{`{"path":"` + testKey[:half], testKey[half:] + `"}`}})...))
		_, res, err := collect(context.Background(), configFor(f.api, base), hello)
		if err != nil {
			t.Fatal(err)
		}
		want := []modelapi.ToolCall{{ID: "id[redacted]", Name: "fs_read[redacted]", Arguments: `{"path":"[redacted]"}`}}
		if !reflect.DeepEqual(res.ToolCalls, want) {
			t.Errorf("calls %+v", res.ToolCalls)
		}
	})
}

// A reply of text only has no calls (nil, not an empty list).
func TestNoToolCalls(t *testing.T) {
	forEachAPI(t, func(t *testing.T, a apiCase) {
		base, _ := serve(t, streamOf(a.stream("hi")...))
		req := hello
		req.Tools = offeredTools
		_, res, err := collect(context.Background(), configFor(a.api, base), req)
		if err != nil || res.ToolCalls != nil {
			t.Fatalf("%+v, %v", res, err)
		}
	})
}

// Servers that speak OpenAI's format differ: some number every call 0 and
// send each whole, some send no index, some repeat the name in every
// fragment or split it. Each call still comes out once, whole.
func TestOpenAICallFragmentsOfOtherServers(t *testing.T) {
	t.Parallel()
	piece := func(p map[string]any) string {
		return oaChunkEvent(map[string]any{"tool_calls": []any{p}}, nil, nil)
	}
	fn := func(name, args string) map[string]any { return map[string]any{"name": name, "arguments": args} }
	base, _ := serve(t, streamOf(
		piece(map[string]any{"index": 0, "id": "c1", "type": "function", "function": fn("fs_read", `{"path":"a"}`)}),
		piece(map[string]any{"index": 0, "id": "c2", "type": "function", "function": fn("fs_read", `{"path":"b"}`)}),
		piece(map[string]any{"id": "c3", "type": "function", "function": fn("shell_", `{"argv"`)}),
		piece(map[string]any{"function": fn("exec", `:["ls"]}`)}),
		piece(map[string]any{"index": 3, "id": "c4", "function": fn("ask_user", `{"text":`)}),
		piece(map[string]any{"index": 3, "id": "c4", "function": fn("ask_user", `"why?"}`)}),
		"data: [DONE]\n\n"))
	req := hello
	req.Tools = offeredTools
	_, res, err := collect(context.Background(), configFor(modelapi.OpenAIChat, base), req)
	if err != nil {
		t.Fatal(err)
	}
	want := []modelapi.ToolCall{
		{ID: "c1", Name: "fs.read", Arguments: `{"path":"a"}`},
		{ID: "c2", Name: "fs.read", Arguments: `{"path":"b"}`},
		{ID: "c3", Name: "shell.exec", Arguments: `{"argv":["ls"]}`},
		{ID: "c4", Name: "ask_user", Arguments: `{"text":"why?"}`},
	}
	if !reflect.DeepEqual(res.ToolCalls, want) {
		t.Errorf("calls %+v\nwant  %+v", res.ToolCalls, want)
	}
}

// Anthropic streams the input of its own server tools (server_tool_use
// blocks) as it does a tool_use block's: those are not calls for ctxfs to
// run, and are not returned.
func TestAnthropicServerToolNotACall(t *testing.T) {
	t.Parallel()
	evs := anCallEvents("", wireCall{"toolu_1", "fs_read", []string{`{}`}})
	server := []string{
		anEventText("content_block_start", map[string]any{"type": "content_block_start", "index": 1,
			"content_block": map[string]any{"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": map[string]any{}}}),
		anArgsEvent(1, `{"query":"x"}`),
		anEventText("content_block_stop", map[string]any{"type": "content_block_stop", "index": 1}),
	}
	evs = append(append(evs[:4:4], server...), evs[4:]...) // after the tool_use block
	base, _ := serve(t, streamOf(evs...))
	_, res, err := collect(context.Background(), configFor(modelapi.AnthropicMessages, base), hello)
	if err != nil {
		t.Fatal(err)
	}
	if want := []modelapi.ToolCall{{ID: "toolu_1", Name: "fs_read", Arguments: "{}"}}; !reflect.DeepEqual(res.ToolCalls, want) {
		t.Errorf("calls %+v", res.ToolCalls)
	}
}

// A reply that makes more than MaxToolCalls calls is refused, EFBIG.
func TestTooManyToolCalls(t *testing.T) {
	t.Parallel()
	forEachCallsFormat(t, func(t *testing.T, f callsFormat) {
		var calls []wireCall
		for i := 0; i <= MaxToolCalls; i++ {
			calls = append(calls, wireCall{sayf("c%d", i), "fs_read", []string{`{}`}})
		}
		base, _ := serve(t, streamOf(f.events("", calls...)...))
		_, res, err := collect(context.Background(), configFor(f.api, base), hello)
		wantRefusal(t, err, syscall.EFBIG, sayf("over %d tool calls", MaxToolCalls))
		if res.ToolCalls != nil {
			t.Errorf("calls returned with the error: %d", len(res.ToolCalls))
		}
	})
}

// A provider that streams arguments without end is cut off once they
// pass MaxToolCallBytes, EFBIG, long before the stream's own bounds: the
// server holds no more than the bound.
func TestToolArgumentsTooLarge(t *testing.T) {
	t.Parallel()
	forEachCallsFormat(t, func(t *testing.T, f callsFormat) {
		start := f.events("", wireCall{"c1", "fs_read", nil})
		start = start[:len(start)-2] // no end: the pieces go on below
		if f.api == modelapi.AnthropicMessages {
			start = start[:len(start)-1] // nor content_block_stop
		}
		piece := f.argsEvent(0, strings.Repeat("x", 64<<10)) // the call is index 0, block 0
		base, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
			sseHeaders(w)
			writeEvents(w, start...)
			bw := bufio.NewWriter(w)
			for n := 0; n < 4*MaxToolCallBytes/(64<<10) && r.Context().Err() == nil; n++ {
				bw.WriteString(piece)
			}
			bw.Flush()
		})
		cfg := configFor(f.api, base)
		cfg.Timeout = time.Minute // a failure must not hang the test
		_, _, err := collect(context.Background(), cfg, hello)
		wantRefusal(t, err, syscall.EFBIG, sayf("tool calls are over %d bytes", MaxToolCallBytes))
	})
}

// The decoders never hold more than MaxToolCallBytes of calls: the piece
// that would pass the bound is refused, not kept.
func TestToolCallsHeldWithinBound(t *testing.T) {
	t.Parallel()
	forEachCallsFormat(t, func(t *testing.T, f callsFormat) {
		dec := wireFor(f.api).decoder(offered{})
		var held func() int
		switch d := dec.(type) {
		case *oaDecoder:
			held = func() int { return argsHeld(&d.calls) }
		case *anDecoder:
			held = func() int { return argsHeld(&d.calls) }
		}
		evs := f.events("", wireCall{"c1", "fs_read", nil})
		for _, ev := range evs[:len(evs)-2] {
			if _, _, err := dec.event(parseEvent(t, ev)); err != nil {
				t.Fatal(err)
			}
		}
		piece := parseEvent(t, f.argsEvent(0, strings.Repeat("y", 300<<10))) // the call is index 0, block 0
		var err error
		for i := 0; i < 10 && err == nil; i++ {
			_, _, err = dec.event(piece)
		}
		if _, ok := err.(callSizeError); !ok {
			t.Fatalf("err %v, want a callSizeError", err)
		}
		if n := held(); n > MaxToolCallBytes || n != 3*(300<<10) {
			t.Errorf("%d bytes of arguments held, bound %d", n, MaxToolCallBytes)
		}
	})
}

// argsHeld is the bytes of arguments calls holds.
func argsHeld(c *calls) int {
	n := 0
	for _, p := range c.list {
		n += p.args.Len()
	}
	return n
}

// parseEvent reads one event text as the stream reader does.
func parseEvent(t *testing.T, text string) sseEvent {
	t.Helper()
	ev, err := newSSEReader(strings.NewReader(text), MaxEventBytes).next()
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// The history rule: a call of an offered tool goes out as a call, under
// its name on the wire; the same call, its tool not offered, goes out as
// text with its result, and no tool is declared.
func TestHistoryCallsOnlyForOfferedTools(t *testing.T) {
	t.Parallel()
	turns := []modelapi.Turn{
		{Role: modelapi.RoleUser, Text: "q"},
		{Role: modelapi.RoleAssistant, ToolCalls: []modelapi.ToolCall{{ID: "c1", Name: "fs.read", Arguments: `{"path":"a"}`}}},
		{Role: modelapi.RoleTool, ToolCallID: "c1", ToolName: "fs.read", Text: "A"},
	}
	cases := []struct {
		a                   apiCase
		offered, notOffered string
	}{
		{openAICase,
			`{"tools":[{"type":"function","function":{"name":"fs_read","parameters":{"type":"object","properties":{}}}}],
			  "messages":[{"role":"user","content":"q"},
				{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"fs_read","arguments":"{\"path\":\"a\"}"}}]},
				{"role":"tool","tool_call_id":"c1","content":"A"}]}`,
			`{"messages":[{"role":"user","content":"q"},
				{"role":"assistant","content":"[tool call fs.read (call c1)]\n{\"path\":\"a\"}"},
				{"role":"user","content":"[tool result from fs.read (call c1)]\nA"}]}`},
		{anthropicCase,
			`{"tools":[{"name":"fs_read","input_schema":{"type":"object","properties":{}}}],
			  "messages":[{"role":"user","content":[{"type":"text","text":"q"}]},
				{"role":"assistant","content":[{"type":"tool_use","id":"c1","name":"fs_read","input":{"path":"a"}}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":"A"}]}]}`,
			`{"messages":[{"role":"user","content":[{"type":"text","text":"q"}]},
				{"role":"assistant","content":[{"type":"text","text":"[tool call fs.read (call c1)]\n{\"path\":\"a\"}"}]},
				{"role":"user","content":[{"type":"text","text":"[tool result from fs.read (call c1)]\nA"}]}]}`},
	}
	for _, c := range cases {
		for _, tools := range [][]modelapi.Tool{{{Name: "fs.read"}}, nil, {{Name: "fs.list"}}} {
			base, reqs := serve(t, streamOf(c.a.stream("ok")...))
			if _, _, err := collect(context.Background(), configFor(c.a.api, base), modelapi.Request{Turns: turns, Tools: tools}); err != nil {
				t.Fatal(err)
			}
			got := pick(t, (<-reqs).body, "tools", "messages")
			want := c.notOffered
			switch {
			case len(tools) > 0 && tools[0].Name == "fs.read":
				want = c.offered
			case len(tools) > 0:
				want = strings.Replace(c.notOffered, `{"messages"`,
					map[string]string{modelapi.OpenAIChat: `{"tools":[{"type":"function","function":{"name":"fs_list","parameters":{"type":"object","properties":{}}}}],"messages"`,
						modelapi.AnthropicMessages: `{"tools":[{"name":"fs_list","input_schema":{"type":"object","properties":{}}}],"messages"`}[c.a.api], 1)
			}
			sameJSON(t, got, want)
		}
	}
}

// pick is the body with only the named fields.
func pick(t *testing.T, body []byte, fields ...string) []byte {
	t.Helper()
	var all map[string]json.RawMessage
	if err := json.Unmarshal(body, &all); err != nil {
		t.Fatal(err)
	}
	out := map[string]json.RawMessage{}
	for _, f := range fields {
		if v, ok := all[f]; ok {
			out[f] = v
		}
	}
	b, _ := json.Marshal(out)
	return b
}

// Tools that cannot be offered are refused before anything is sent.
func TestInvalidTools(t *testing.T) {
	forEachAPI(t, func(t *testing.T, a apiCase) {
		base, reqs := serve(t, streamOf(a.stream("x")...))
		for _, c := range []struct {
			tools []modelapi.Tool
			words []string
		}{
			{[]modelapi.Tool{{Name: "fs read"}}, []string{`"fs read"`, "not a name"}},
			{[]modelapi.Tool{{Name: ""}}, []string{"not a name"}},
			{[]modelapi.Tool{{Name: strings.Repeat("a", 65)}}, []string{"not a name"}},
			{[]modelapi.Tool{{Name: "a.b"}, {Name: "a_b"}}, []string{`"a.b"`, `"a_b"`, "on the wire"}},
			{[]modelapi.Tool{{Name: "fs.read", Parameters: json.RawMessage(`[1]`)}}, []string{"not a JSON object"}},
			{[]modelapi.Tool{{Name: "fs.read", Parameters: json.RawMessage(`{`)}}, []string{"not a JSON object"}},
		} {
			_, _, err := collect(context.Background(), configFor(a.api, base), modelapi.Request{Turns: hello.Turns, Tools: c.tools})
			wantRefusal(t, err, syscall.EINVAL, c.words...)
		}
		if len(reqs) != 0 {
			t.Error("a request with invalid tools was sent")
		}
	})
}

// OpenAI's o-series and GPT-5 models refuse max_tokens and take
// max_completion_tokens; every other model gets max_tokens, which the
// other servers of the format know.
func TestMaxCompletionTokens(t *testing.T) {
	t.Parallel()
	for model, want := range map[string]bool{
		"o1": true, "o1-preview": true, "o1-mini-2024-09-12": true, "o3": true, "o3-mini": true,
		"o4-mini": true, "gpt-5": true, "gpt-5-mini": true, "gpt-5.1": true, "GPT-5-nano": true,
		"openai/o3": true, "openai/gpt-5": true,
		"gpt-4o": false, "gpt-4.1": false, "gpt-4.1-mini": false, "gpt-3.5-turbo": false,
		"llama3.1:8b": false, "omni-7b": false, "o": false, "qwen2.5-coder": false, "chatgpt-4o-latest": false,
	} {
		if got := wantsMaxCompletionTokens(model); got != want {
			t.Errorf("%s: max_completion_tokens %v, want %v", model, got, want)
		}
	}
	base, reqs := serve(t, streamOf(openAICase.stream("ok")...))
	cfg := configFor(modelapi.OpenAIChat, base)
	cfg.MaxTokens = 100
	for model, want := range map[string]string{"o4-mini": `{"max_completion_tokens":100}`, "gpt-4o": `{"max_tokens":100}`} {
		cfg.ModelID = model
		if _, _, err := collect(context.Background(), cfg, hello); err != nil {
			t.Fatal(err)
		}
		sameJSON(t, pick(t, (<-reqs).body, "max_tokens", "max_completion_tokens"), want)
	}
}
