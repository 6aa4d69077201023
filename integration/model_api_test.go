package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// apiKey is the secret the fake provider expects; it must appear nowhere
// but in the requests' auth headers.
const apiKey = "sk-test-7f3a9c1e5b2d4680"

// fakeProvider is a real HTTP server speaking a provider's wire format:
// each request is recorded and answered by the next scripted reply.
type fakeProvider struct {
	*httptest.Server
	mu      sync.Mutex
	bodies  []map[string]any
	headers []http.Header
	reply   func(w http.ResponseWriter, r *http.Request)
}

func newFakeProvider(t testing.TB, reply func(w http.ResponseWriter, r *http.Request)) *fakeProvider {
	p := &fakeProvider{reply: reply}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		b, _ := io.ReadAll(r.Body)
		json.Unmarshal(b, &body)
		p.mu.Lock()
		p.bodies = append(p.bodies, body)
		p.headers = append(p.headers, r.Header.Clone())
		reply := p.reply
		p.mu.Unlock()
		if strings.Contains(string(b), apiKey) || strings.Contains(r.URL.String(), apiKey) {
			http.Error(w, "the key leaked into the body or URL", 400)
			return
		}
		reply(w, r)
	}))
	t.Cleanup(p.Server.Close)
	return p
}

func (p *fakeProvider) last() (map[string]any, http.Header) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.bodies) == 0 {
		return nil, nil
	}
	return p.bodies[len(p.bodies)-1], p.headers[len(p.headers)-1]
}

// sse writes server-sent events, flushing each.
func sse(w http.ResponseWriter, events ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, e := range events {
		fmt.Fprint(w, e+"\n\n")
		w.(http.Flusher).Flush()
	}
}

// openAIReply streams text in two pieces, then usage and [DONE].
func openAIReply(text string) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		half := len(text) / 2
		sse(w,
			`data: {"choices":[{"index":0,"delta":{"role":"assistant","content":`+jsonString(text[:half])+`}}]}`,
			`data: {"choices":[{"index":0,"delta":{"content":`+jsonString(text[half:])+`},"finish_reason":"stop"}]}`,
			`data: {"choices":[],"usage":{"prompt_tokens":31,"completion_tokens":7,"total_tokens":38}}`,
			`data: [DONE]`)
	}
}

func jsonString(s string) string { b, _ := json.Marshal(s); return string(b) }

// newModelServer starts a server with the model fake/llm answered by the
// API at endpoint, and the agent "assistant" (no program) that uses it.
func newModelServer(t testing.TB, api, endpoint string, extra map[string]string) *server {
	requireFUSE(t)
	return newServerWith(t, func(s *server) { defineFakeModel(t, s, api, endpoint, extra) })
}

// defineFakeModel defines fake/llm (model_id llm-7b) answered by the API
// at endpoint, with the files of extra, and the agent "assistant" that
// uses it; before the server starts.
func defineFakeModel(t testing.TB, s *server, api, endpoint string, extra map[string]string) {
	s.env = append(s.env, "FAKE_PROVIDER_KEY="+apiKey)
	files := map[string]string{"api": api, "endpoint": endpoint, "model_id": "llm-7b", "api_key_env": "FAKE_PROVIDER_KEY"}
	for k, v := range extra {
		files[k] = v
	}
	d := filepath.Join(s.root, "model", "fake", "llm.d")
	testkit.Must(t, os.MkdirAll(d, 0o755))
	for f, v := range files {
		testkit.Must(t, os.WriteFile(filepath.Join(d, f), []byte(v+"\n"), 0o644))
	}
	s.define("assistant", map[string]string{"model": "fake/llm", "AGENTS.md": "Answer briefly."})
}

func (s *server) ask(session, id, input string) []frame {
	s.t.Helper()
	return s.mustRequest("assistant", fmt.Sprintf(`{"op":"send","id":%q,"session":%q,"input":%q}`, id, session, input))
}

// deltaText joins the delta frames' text.
func deltaText(frames []frame) string {
	var b strings.Builder
	for _, f := range frames {
		if f["type"] == "delta" {
			b.WriteString(f["text"].(string))
		}
	}
	return b.String()
}

// TestModelAPIOpenAIChat: an agent without a program is answered by its
// model's openai-chat API: the request carries the AGENTS.md rules and
// meta.json's rule as the system prompt, the conversation in order, the
// model id and the key in the header alone; the reply streams as deltas
// and is recorded with the provider's usage; the key is nowhere else.
func TestModelAPIOpenAIChat(t *testing.T) {
	p := newFakeProvider(t, openAIReply("first answer"))
	s := newModelServer(t, "openai-chat", p.URL+"/v1", map[string]string{"max_tokens": "300", "temperature": "0.5"})
	frames := s.ask("talk", "a1", "first question")
	if got := deltaText(frames); got != "first answer" || frames[len(frames)-1]["status"] != "ok" {
		t.Fatalf("first reply %q: %v\nlog:\n%s", got, frames, s.logText())
	}
	dir := s.sessionDir(0, "assistant", "talk")
	testkit.Must(t, os.WriteFile(filepath.Join(dir, "meta.json"), []byte(`{"client":"ctx","scope":"private","rule":"You are Ada."}`), 0o600))
	p.reply = openAIReply("second answer")
	frames = s.ask("talk", "a2", "second question")
	if got := deltaText(frames); got != "second answer" {
		t.Fatalf("second reply %q: %v", got, frames)
	}
	body, hdr := p.last()
	if hdr.Get("Authorization") != "Bearer "+apiKey {
		t.Errorf("Authorization header %q", hdr.Get("Authorization"))
	}
	want := `[{"content":"Answer briefly.\n\nYou are Ada.","role":"system"},{"content":"first question","role":"user"},{"content":"first answer","role":"assistant"},{"content":"second question","role":"user"}]`
	if got, _ := json.Marshal(body["messages"]); string(got) != want {
		t.Errorf("messages\n got %s\nwant %s", got, want)
	}
	if body["model"] != "llm-7b" || body["stream"] != true || body["max_tokens"] != 300.0 || body["temperature"] != 0.5 {
		t.Errorf("request body %v", body)
	}
	var usage frame
	for _, f := range frames {
		if f["type"] == "usage" {
			usage = f
		}
	}
	if usage["input_tokens"] != 31.0 || usage["output_tokens"] != 7.0 || usage["model"] != "fake/llm" {
		t.Errorf("usage frame %v", usage)
	}
	if msgs := fileBytes(t, filepath.Join(dir, "messages.jsonl")); strings.Count(msgs, `"role":"assistant"`) != 2 || !strings.Contains(msgs, "second answer") {
		t.Errorf("messages.jsonl:\n%s", msgs)
	}
	eventually(t, 5*time.Second, "latest.md in the store (written behind)", func() bool {
		return fileBytes(t, filepath.Join(dir, "latest.md")) == "second answer\n"
	})
	checkKeyNowhere(t, s)
}

// checkKeyNowhere fails when the API key appears in any file of the store,
// the session tree, or the server's log.
func checkKeyNowhere(t *testing.T, s *server) {
	t.Helper()
	checkSecretNowhere(t, s, apiKey)
}

// checkSecretNowhere fails when secret appears in any file of the store,
// the session tree, or the server's log.
func checkSecretNowhere(t *testing.T, s *server, apiKey string) {
	t.Helper()
	for _, dir := range []string{s.store, s.mnt("home")} {
		filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
			if err == nil && info.Mode().IsRegular() {
				if b, _ := os.ReadFile(p); strings.Contains(string(b), apiKey) {
					t.Errorf("the API key is in %s", p)
				}
			}
			return nil
		})
	}
	if strings.Contains(s.logText(), apiKey) {
		t.Errorf("the API key is in the server's log")
	}
}

// TestModelAPIAnthropicViaModelSocket: a model session at the model's own
// socket is answered by its anthropic-messages API.
func TestModelAPIAnthropicViaModelSocket(t *testing.T) {
	p := newFakeProvider(t, func(w http.ResponseWriter, r *http.Request) {
		sse(w,
			"event: message_start\ndata: "+`{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],"usage":{"input_tokens":12,"output_tokens":1}}}`,
			"event: content_block_start\ndata: "+`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			"event: content_block_delta\ndata: "+`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Bonjour"}}`,
			"event: content_block_delta\ndata: "+`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" à vous"}}`,
			"event: content_block_stop\ndata: "+`{"type":"content_block_stop","index":0}`,
			"event: message_delta\ndata: "+`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":5}}`,
			"event: message_stop\ndata: "+`{"type":"message_stop"}`)
	})
	s := newModelServer(t, "anthropic-messages", p.URL, nil)
	frames := s.requestModel("fake/llm", `{"op":"send","id":"m1","input":"Salut"}`)
	if got := deltaText(frames); got != "Bonjour à vous" || frames[len(frames)-1]["status"] != "ok" {
		t.Fatalf("reply %q: %v\nlog:\n%s", got, frames, s.logText())
	}
	body, hdr := p.last()
	if hdr.Get("x-api-key") != apiKey || hdr.Get("anthropic-version") == "" || hdr.Get("Authorization") != "" {
		t.Errorf("headers %v", hdr)
	}
	if got, _ := json.Marshal(body["messages"]); string(got) != `[{"content":"Salut","role":"user"}]` && !strings.Contains(string(got), `"Salut"`) {
		t.Errorf("messages %s", got)
	}
	if body["model"] != "llm-7b" || body["max_tokens"] == nil {
		t.Errorf("request body %v", body)
	}
	checkKeyNowhere(t, s)
}

// requestModel sends one request line to a model's socket.
func (s *server) requestModel(model, line string) []frame {
	s.t.Helper()
	conn, err := net.Dial("unix", filepath.Join(s.root, "model", model+".sock"))
	testkit.Must(s.t, err)
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	conn.Write([]byte(line + "\n"))
	var frames []frame
	sc := bufio.NewScanner(conn)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var f frame
		testkit.Must(s.t, json.Unmarshal(sc.Bytes(), &f))
		frames = append(frames, f)
	}
	return frames
}

// TestModelAPIFailures: provider failures are error frames with a fitting
// errno and done error, and nothing but the user's message is recorded.
func TestModelAPIFailures(t *testing.T) {
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	cases := []struct {
		name, code, words string
		reply             func(w http.ResponseWriter, r *http.Request)
	}{
		{"unauthorized", "EACCES", "bad key", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, `{"error":{"message":"bad key","type":"invalid_request_error"}}`, http.StatusUnauthorized)
		}},
		{"rate-limited", "EAGAIN", "slow down please", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, `{"error":{"message":"slow down please","type":"rate_limit"}}`, http.StatusTooManyRequests)
		}},
		{"cut-mid-event", "EIO", "", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, `data: {"choices":[{"index":0,"delta":{"content":"par`)
			w.(http.Flusher).Flush()
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		}},
		{"malformed", "EIO", "", func(w http.ResponseWriter, r *http.Request) {
			sse(w, `data: {"choices":[{"index":0,"delta":{"content":}}]}`, `data: [DONE]`)
		}},
		{"silent", "ETIMEDOUT", "", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		}},
	}
	p := newFakeProvider(t, nil)
	s := newModelServer(t, "openai-chat", p.URL+"/v1", map[string]string{"timeout": "1"})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p.mu.Lock()
			p.reply = c.reply
			p.mu.Unlock()
			start := time.Now()
			frames := s.ask(c.name, "f1", "hello")
			if time.Since(start) > 10*time.Second {
				t.Errorf("the run took %v", time.Since(start))
			}
			last := frames[len(frames)-1]
			if errorCode(frames) != c.code || last["status"] != "error" {
				t.Fatalf("want %s and done error, got %v", c.code, frames)
			}
			if !strings.Contains(errorMessage(frames), c.words) {
				t.Errorf("error message %q lacks the provider's %q", errorMessage(frames), c.words)
			}
			msgs := fileBytes(t, filepath.Join(s.sessionDir(0, "assistant", c.name), "messages.jsonl"))
			if strings.Contains(msgs, `"assistant"`) && c.name != "cut-mid-event" {
				t.Errorf("an assistant message was recorded for a failed run:\n%s", msgs)
			}
		})
	}
	checkKeyNowhere(t, s)
}

// TestModelAPICancelMidStream: a cancel aborts the HTTP request; nothing
// after it is recorded, and done says cancelled.
func TestModelAPICancelMidStream(t *testing.T) {
	aborted := make(chan struct{})
	p := newFakeProvider(t, func(w http.ResponseWriter, r *http.Request) {
		sse(w, `data: {"choices":[{"index":0,"delta":{"content":"thinking"}}]}`)
		<-r.Context().Done()
		close(aborted)
	})
	s := newModelServer(t, "openai-chat", p.URL+"/v1", nil)
	done := make(chan []frame, 1)
	go func() { done <- s.ask("c", "c1", "long question") }()
	eventually(t, 10*time.Second, "the first delta recorded", func() bool {
		frames, _ := s.request("assistant", `{"op":"status","session":"c"}`)
		return len(frames) == 1 && len(frames[0]["runs"].([]any)) == 1 && p.hits() == 1
	})
	if f := s.mustRequest("assistant", `{"op":"cancel","id":"c1"}`); f[0]["cancelled"] != true {
		t.Fatalf("cancel: %v", f)
	}
	select {
	case <-aborted:
	case <-time.After(10 * time.Second):
		t.Fatal("the provider's request was not aborted")
	}
	frames := <-done
	if last := frames[len(frames)-1]; last["status"] != "cancelled" {
		t.Fatalf("want done cancelled: %v", frames)
	}
	if msgs := fileBytes(t, filepath.Join(s.sessionDir(0, "assistant", "c"), "messages.jsonl")); strings.Contains(msgs, "thinking") {
		t.Errorf("text streamed before the cancel was recorded as the answer:\n%s", msgs)
	}
}

func (p *fakeProvider) hits() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.bodies)
}
