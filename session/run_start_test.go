package session

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/proto"
)

// earlyProvider is an OpenAI-compatible provider for the tests of a model
// run's early first request: it answers "hello" in two deltas, or, when
// hold is set, answers nothing until the request is aborted.
type earlyProvider struct {
	*httptest.Server
	hold      atomic.Bool
	asked     atomic.Int32  // requests received
	held      chan struct{} // a token for each request held
	cancelled chan struct{} // a token for each held request aborted
}

func newEarlyProvider(t *testing.T) *earlyProvider {
	p := &earlyProvider{held: make(chan struct{}, 8), cancelled: make(chan struct{}, 8)}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.asked.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		if p.hold.Load() {
			w.WriteHeader(http.StatusOK)
			fmt.Fprint(w, `data: {"choices":[{"index":0,"delta":{"content":"too early"}}]}`+"\n\n")
			w.(http.Flusher).Flush()
			p.held <- struct{}{}
			<-r.Context().Done()
			p.cancelled <- struct{}{}
			return
		}
		for _, ev := range []string{
			`{"choices":[{"index":0,"delta":{"role":"assistant","content":"hel"}}]}`,
			`{"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}`,
			`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}`,
			`[DONE]`,
		} {
			fmt.Fprint(w, "data: "+ev+"\n\n")
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(p.Server.Close)
	return p
}

// defineModel defines the model fake/llm answered by the provider at url
// and the agent "assistant" that uses it.
func (env *testEnv) defineModel(url string) {
	d := filepath.Join(env.root, "model", "fake", "llm.d")
	testkit.Must(env.t, os.MkdirAll(d, 0o755))
	for f, v := range map[string]string{"api": "openai-chat", "endpoint": url + "/v1", "model_id": "llm-7b"} {
		testkit.Must(env.t, os.WriteFile(filepath.Join(d, f), []byte(v+"\n"), 0o644))
	}
	env.define("assistant", map[string]string{"model": "fake/llm", "AGENTS.md": "Answer briefly."})
}

func assistant() Target { return Target{Kind: abi.KindAgent, Owner: "assistant"} }

// inBatchWrite reports whether the caller is the journal writing a batch.
func inBatchWrite() bool {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for f, more := frames.Next(); more; f, more = frames.Next() {
		if strings.HasSuffix(f.Function, "(*Journal).commitOnce") {
			return true
		}
	}
	return false
}

// TestStartRefusedAtCommit: a model run's first request goes to the
// provider while its start syncs (run_start.go). When the start cannot be
// made durable (here the write gate closes as the journal is about to
// write the start's batch: a cluster host that lost its lease, EAGAIN;
// once the provider has the run's request and has sent a delta), the
// send is refused with that errno, the provider's request is aborted,
// no frame reaches the client (not the delta the provider sent at once),
// and no run exists; after a restart the session's files are as before
// the send, byte for byte.
func TestStartRefusedAtCommit(t *testing.T) {
	p := newEarlyProvider(t)
	var armed atomic.Bool
	base := t.TempDir()
	env := &testEnv{t: t, store: filepath.Join(base, "store"), root: filepath.Join(base, "root")}
	env.defineModel(p.URL)
	open := func(gate func() error) {
		e, err := Open(Config{Store: env.store, Root: env.root, Gate: gate})
		testkit.Must(t, err)
		env.e = e
	}
	open(func() error {
		if armed.Load() && inBatchWrite() {
			select { // the journal asks without its lock before a batch's write
			case <-p.held:
			case <-time.After(10 * time.Second):
			}
			return errors.New("closed by the test")
		}
		return nil
	})
	frames := env.send(root0, assistant(), `{"op":"send","id":"w1","session":"s","input":"hi"}`)
	if types(frames) != "start,delta,delta,usage,message,done" || frames[len(frames)-1].Str("status") != "ok" {
		t.Fatalf("first send: %s %v", types(frames), frames)
	}
	dir := env.sessDir("home/0", "assistant", "s")
	time.Sleep(1100 * time.Millisecond) // updated_at's second changes no more behind the test
	env.e.derived.Flush("", false)
	before := testkit.Snapshot(t, dir, nil)

	p.hold.Store(true)
	armed.Store(true)
	asked := p.asked.Load()
	req, err := proto.ParseRequest([]byte(`{"op":"send","id":"d1","session":"s","input":"refused"}`))
	testkit.Must(t, err)
	r, err := env.e.Begin(context.Background(), root0, assistant(), req)
	if r != nil {
		got, _ := drain(r)
		t.Fatalf("a send whose start was not durable got a reply: %s %v", types(got), got)
	}
	testkit.WantErrno(t, "send refused at commit", err, syscall.EAGAIN)
	if p.asked.Load() != asked+1 {
		t.Fatalf("the provider got %d requests, want the early one", p.asked.Load()-asked)
	}
	select {
	case <-p.cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the early request was not aborted")
	}
	env.e.mu.Lock()
	runs := len(env.e.runs)
	env.e.mu.Unlock()
	if runs != 0 {
		t.Fatalf("%d runs after a refused send", runs)
	}
	env.e.Close()

	open(nil)
	defer env.e.Close()
	// The restart's replay cuts the logs back to what the journal holds,
	// their bytes as before (a new mtime), and seals them anew.
	after := testkit.Snapshot(t, dir, nil)
	for _, m := range []map[string]string{before, after} {
		for k, v := range m {
			if strings.HasPrefix(k, ".seal/") {
				delete(m, k)
			} else if strings.HasSuffix(k, ".jsonl") {
				m[k] = v[:strings.LastIndexByte(v, ' ')]
			}
		}
	}
	testkit.Same(t, "a send refused at commit, after a restart", before, after)
	p.hold.Store(false)
	frames = env.send(root0, assistant(), `{"op":"send","id":"d2","session":"s","input":"again"}`)
	if types(frames) != "start,delta,delta,usage,message,done" {
		t.Fatalf("the next send: %s %v", types(frames), frames)
	}
}

// TestStartRefusedBeforeWriteAsksNothing: a send refused as its start is
// written (a damaged log: EIO) never reaches the provider and writes
// nothing.
func TestStartRefusedBeforeWriteAsksNothing(t *testing.T) {
	p := newEarlyProvider(t)
	env := newEnv(t)
	env.defineModel(p.URL)
	env.send(root0, assistant(), `{"op":"send","id":"w1","session":"s","input":"hi"}`)
	dir := env.sessDir("home/0", "assistant", "s")
	f, err := os.OpenFile(filepath.Join(dir, "messages.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	testkit.Must(t, err)
	f.WriteString(`{"role":"user","content":"forged"}` + "\n")
	f.Close()
	before := env.settledTree()
	asked := p.asked.Load()
	_, err = env.do(root0, assistant(), `{"op":"send","id":"d1","session":"s","input":"refused"}`)
	testkit.WantErrno(t, "send to a damaged log", err, syscall.EIO)
	if n := p.asked.Load() - asked; n != 0 {
		t.Fatalf("the provider got %d requests for a send refused before its start was written", n)
	}
	testkit.Same(t, "a send refused before its start was written", before, testkit.Snapshot(t, env.store, nil))
}
