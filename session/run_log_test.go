package session

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// syncBuffer is a log destination that runs write from their own
// goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines are the JSON log lines written so far.
func (b *syncBuffer) lines(t *testing.T) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// newLoggedEnv is newEnv with the engine's log in JSON in the buffer
// returned; define, when not nil, defines more agents before the engine
// opens.
func newLoggedEnv(t *testing.T, define func(*testEnv)) (*testEnv, *syncBuffer) {
	base := t.TempDir()
	env := &testEnv{t: t, store: filepath.Join(base, "store"), root: filepath.Join(base, "root")}
	env.define("coder", map[string]string{"model": "debug/echo"})
	if define != nil {
		define(env)
	}
	buf := &syncBuffer{}
	e, err := Open(Config{Store: env.store, Root: env.root, Log: slog.New(slog.NewJSONHandler(buf, nil))})
	testkit.Must(t, err)
	env.e = e
	t.Cleanup(func() { e.Close() })
	return env, buf
}

// Each run logs its start and its end with its id, agent, session, scope
// and uid; a failed run logs the errno of its error; the input and the
// agent's output are never in the log.
func TestRunStartAndEndLogged(t *testing.T) {
	env, buf := newLoggedEnv(t, func(env *testEnv) {
		env.define("broken", map[string]string{"abi": "text", "program": "#!/bin/sh\necho the-output\necho boom-secret >&2\nexit 3\n"})
	})

	ok := env.send(root0, coder(), `{"op":"send","id":"c1","session":"s","input":"the-input-text"}`)
	bad := env.send(root0, Target{Kind: "agent", Owner: "broken"}, `{"op":"send","id":"c2","session":"t","input":"more-input"}`)
	want := map[string][]string{ // run id → messages, in order
		ok[0].Str("run"):  {"run start", "run done"},
		bad[0].Str("run"): {"run start", "run error"},
	}
	got := map[string][]string{}
	for _, l := range buf.lines(t) {
		run, _ := l["run"].(string)
		got[run] = append(got[run], l["msg"].(string))
		if l["scope"] != "private" || l["uid"] != float64(0) || l["home"] != "home/0" {
			t.Errorf("line without its scope, uid or home: %v", l)
		}
		switch run {
		case ok[0].Str("run"):
			if l["agent"] != "coder" || l["session"] != "s" {
				t.Errorf("coder line: %v", l)
			}
			if l["msg"] == "run done" && l["status"] != "ok" {
				t.Errorf("coder end: %v", l)
			}
		case bad[0].Str("run"):
			if l["msg"] == "run error" && (l["status"] != "error" || l["error"] != "EIO" || l["level"] != "WARN") {
				t.Errorf("broken end: %v", l)
			}
		}
	}
	for run, msgs := range want {
		if strings.Join(got[run], ",") != strings.Join(msgs, ",") {
			t.Errorf("run %s: logged %v, want %v", run, got[run], msgs)
		}
	}
	t.Logf("log:\n%s", buf.buf.String())
	for _, secret := range []string{"the-input-text", "more-input", "the-output", "boom-secret"} {
		if strings.Contains(buf.buf.String(), secret) {
			t.Errorf("the log holds %q:\n%s", secret, buf.buf.String())
		}
	}
}

// A derived file that cannot be written is logged once, at warn level,
// with its path and the error (it is written again later), not printed
// on the server's stderr.
func TestDerivedWriteFailureLogged(t *testing.T) {
	env, buf := newLoggedEnv(t, nil)
	env.send(root0, coder(), `{"op":"send","id":"c1","input":"hello"}`)
	ref := coderDefault()
	s, release, err := env.e.lookup(ref)
	testkit.Must(t, err)
	defer release()
	planted := filepath.Join(env.store, s.file(abi.FileLatest))
	testkit.Must(t, os.Remove(planted))
	testkit.Must(t, os.MkdirAll(filepath.Join(planted, "in-the-way"), 0o700))
	s.fileMu.Lock()
	s.putDerived(abi.FileLatest, []byte("pending\n"), nil)
	s.fileMu.Unlock()
	env.e.derived.Flush(s.rel, true)
	env.e.derived.Flush(s.rel, true) // its second failure is not logged again
	var warned []map[string]any
	for _, l := range buf.lines(t) {
		if l["level"] == "WARN" {
			warned = append(warned, l)
		}
	}
	if len(warned) != 1 || warned[0]["msg"] != "derived file not written; written again in a moment" ||
		warned[0]["file"] != s.file(abi.FileLatest) || warned[0]["err"] == "" {
		t.Fatalf("warnings: %v, want one about %s", warned, s.file(abi.FileLatest))
	}
}
