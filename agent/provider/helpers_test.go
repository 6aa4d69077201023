package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/modelapi"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// testKey is the API key the tests configure; it must show up only in the
// auth header.
const testKey = "sk-test-9f3c2a7e1b"

// recorded is one request a fake provider received.
type recorded struct {
	method, path, rawQuery string
	header                 http.Header
	body                   []byte
}

// serve starts a fake provider: every request is recorded, then answered
// by reply. The channel holds the recorded requests.
func serve(t testing.TB, reply http.HandlerFunc) (string, <-chan recorded) {
	t.Helper()
	reqs := make(chan recorded, 64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		reqs <- recorded{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), body}
		reply(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, reqs
}

// sseHeaders starts an event-stream reply.
func sseHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
}

// writeEvents writes events one flush each, so that the client sees them
// arrive apart.
func writeEvents(w http.ResponseWriter, events ...string) {
	for _, ev := range events {
		io.WriteString(w, ev)
		w.(http.Flusher).Flush()
	}
}

// streamOf replies with a whole stream.
func streamOf(events ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sseHeaders(w)
		writeEvents(w, events...)
	}
}

// replyStatus replies with a status and a JSON body.
func replyStatus(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		io.WriteString(w, body)
	}
}

// mustJSON marshals v.
func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// apiCase is one API's wire format, as its real server sends it, for the
// tests that run against both.
type apiCase struct {
	api string
	// text is one event carrying a piece of text.
	text func(s string) string
	// stream is a whole reply: pieces of text, usage 11 in / 7 out, its end.
	stream func(pieces ...string) []string
	// errorBody is an error response body in the API's format.
	errorBody func(msg, typ string) string
	// errorEvent is an error sent inside the stream.
	errorEvent func(msg, typ string) string
	// stopReason is what stream's end reports.
	stopReason string
}

var openAICase = apiCase{
	api: modelapi.OpenAIChat,
	text: func(s string) string {
		return oaChunkEvent(map[string]any{"content": s}, nil, nil)
	},
	stream: func(pieces ...string) []string {
		evs := []string{oaChunkEvent(map[string]any{"role": "assistant", "content": ""}, nil, nil)}
		for _, p := range pieces {
			evs = append(evs, oaChunkEvent(map[string]any{"content": p}, nil, nil))
		}
		stop := "stop"
		return append(evs, oaChunkEvent(map[string]any{}, &stop, nil),
			"data: "+mustJSON(map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "test-model",
				"choices": []any{}, "usage": map[string]any{"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}})+"\n\n",
			"data: [DONE]\n\n")
	},
	errorBody: func(msg, typ string) string {
		return mustJSON(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}})
	},
	errorEvent: func(msg, typ string) string {
		return "data: " + mustJSON(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}}) + "\n\n"
	},
	stopReason: "stop",
}

// oaChunkEvent is one chat.completion.chunk event as OpenAI sends it.
func oaChunkEvent(delta map[string]any, finish *string, usage map[string]any) string {
	ch := map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "test-model",
		"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}}
	if usage != nil {
		ch["usage"] = usage
	}
	return "data: " + mustJSON(ch) + "\n\n"
}

var anthropicCase = apiCase{
	api:  modelapi.AnthropicMessages,
	text: anTextEvent,
	stream: func(pieces ...string) []string {
		evs := []string{
			anEventText("message_start", map[string]any{"type": "message_start", "message": map[string]any{
				"id": "msg_1", "type": "message", "role": "assistant", "content": []any{}, "model": "test-model",
				"stop_reason": nil, "stop_sequence": nil, "usage": map[string]any{"input_tokens": 11, "output_tokens": 1}}}),
			anEventText("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
				"content_block": map[string]any{"type": "text", "text": ""}}),
			"event: ping\ndata: {\"type\": \"ping\"}\n\n",
		}
		for _, p := range pieces {
			evs = append(evs, anTextEvent(p))
		}
		return append(evs,
			anEventText("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}),
			anEventText("message_delta", map[string]any{"type": "message_delta",
				"delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 7}}),
			anEventText("message_stop", map[string]any{"type": "message_stop"}))
	},
	errorBody: func(msg, typ string) string {
		return mustJSON(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
	},
	errorEvent: func(msg, typ string) string {
		return anEventText("error", map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
	},
	stopReason: "end_turn",
}

// anEventText is one Anthropic event: its name line and its data.
func anEventText(name string, data any) string {
	return "event: " + name + "\ndata: " + mustJSON(data) + "\n\n"
}

func anTextEvent(s string) string {
	return anEventText("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
		"delta": map[string]any{"type": "text_delta", "text": s}})
}

var apiCases = []apiCase{openAICase, anthropicCase}

// configFor points api at a fake provider's base URL, with the endpoint
// written as that API's SDK takes it.
func configFor(api, base string) modelapi.Config {
	endpoint := base + "/v1"
	if api == modelapi.AnthropicMessages {
		endpoint = base
	}
	return modelapi.Config{API: api, Endpoint: endpoint, ModelID: "test-model", APIKey: testKey}
}

// hello is the smallest request.
var hello = modelapi.Request{Turns: []modelapi.Turn{{Role: modelapi.RoleUser, Text: "hello"}}}

// collect runs Stream and gathers the deltas.
func collect(ctx context.Context, cfg modelapi.Config, req modelapi.Request) ([]string, modelapi.Result, error) {
	var deltas []string
	res, err := Stream(ctx, cfg, req, func(s string) { deltas = append(deltas, s) })
	return deltas, res, err
}

// wantRefusal is testkit.WantErrno for a provider's refusal, which must be
// an *abi.Error itself (what the engine records) and never carry the key.
func wantRefusal(t testing.TB, err error, want syscall.Errno, words ...string) {
	t.Helper()
	testkit.WantErrno(t, "provider", err, want, words...)
	if _, ok := err.(*abi.Error); !ok {
		t.Errorf("error is a %T, want *abi.Error itself", err)
	}
	if err != nil && strings.Contains(err.Error(), testKey) {
		t.Errorf("error %q carries the key", err)
	}
}

// sayf is fmt.Sprintf, for readability in tables.
var sayf = fmt.Sprintf

// streamHello streams "Hello, world" in four deltas in c's wire format,
// checks the deltas and the result, and returns the request the fake
// provider got, which must be a POST to path.
func streamHello(t *testing.T, c apiCase, path string) recorded {
	t.Helper()
	base, reqs := serve(t, streamOf(c.stream("Hel", "lo, ", "wor", "ld")...))
	deltas, res, err := collect(context.Background(), configFor(c.api, base), toolRequest)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"Hel", "lo, ", "wor", "ld"}; !reflect.DeepEqual(deltas, want) {
		t.Errorf("deltas %q, want %q", deltas, want)
	}
	if want := (modelapi.Result{Text: "Hello, world", InputTokens: 11, OutputTokens: 7, StopReason: c.stopReason}); !reflect.DeepEqual(res, want) {
		t.Errorf("result %+v, want %+v", res, want)
	}
	rec := <-reqs
	if rec.method != http.MethodPost || rec.path != path {
		t.Errorf("%s %s, want POST %s", rec.method, rec.path, path)
	}
	return rec
}

// offer is the offered tools of those names, with no parameters.
func offer(t testing.TB, names ...string) offered {
	t.Helper()
	var tools []modelapi.Tool
	for _, n := range names {
		tools = append(tools, modelapi.Tool{Name: n})
	}
	o, err := newOffered(tools)
	if err != nil {
		t.Fatal(err)
	}
	return o
}
