package session

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/index"
	"github.com/ctxfs/ctxfs/internal/testkit"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/layout"
)

// testEngine opens an engine on a fresh store with a root holding the
// given agent definitions (name → files of NAME.d).
type testEnv struct {
	t           testing.TB
	e           *Engine
	store       string
	root        string
	maxSessions int               // Config.MaxSessions; 0: the default
	limits      quota.LimitConfig // Config.Limits; zero: the defaults
}

func newEnv(t *testing.T) *testEnv { return newEnvTB(t) }

func newEnvTB(t testing.TB) *testEnv { return newEnvLimits(t, quota.LimitConfig{}) }

// newEnvLimits is newEnv with an engine of the given quotas.
func newEnvLimits(t testing.TB, limits quota.LimitConfig) *testEnv {
	t.Helper()
	base := t.TempDir()
	env := &testEnv{t: t, store: filepath.Join(base, "store"), root: filepath.Join(base, "root"), limits: limits}
	env.define("coder", map[string]string{"model": "debug/echo"})
	env.open()
	return env
}

func (env *testEnv) open() {
	e, err := Open(Config{Store: env.store, Root: env.root, MaxSessions: env.maxSessions, Limits: env.limits})
	if err != nil {
		env.t.Fatal(err)
	}
	env.e = e
	env.t.Cleanup(func() { e.Close() })
}

// define writes <root>/agent/NAME.d/ files; "program" becomes the
// executable <root>/agent/NAME.
func (env *testEnv) define(name string, files map[string]string) {
	d := filepath.Join(env.root, "agent", name+".d")
	testkit.Must(env.t, os.MkdirAll(d, 0o755))
	for f, v := range files {
		if f == "program" {
			testkit.Must(env.t, os.WriteFile(filepath.Join(env.root, "agent", name), []byte(v), 0o755))
			// Programs run in their cwd under the mount (never in the
			// store). These tests run without FUSE, so a plain directory
			// stands in for root's chroot under the mount; the
			// integration tests run programs under real mounts.
			testkit.Must(env.t, os.MkdirAll(filepath.Join(env.root, "home", "0", "agent", name, "root"), 0o755))
			continue
		}
		testkit.Must(env.t, os.MkdirAll(filepath.Dir(filepath.Join(d, f)), 0o755))
		testkit.Must(env.t, os.WriteFile(filepath.Join(d, f), []byte(v), 0o644))
	}
}

var root0 = layout.Caller{Uid: 0, Gid: 0, Pid: os.Getpid()}

func coder() Target { return Target{Kind: abi.KindAgent, Owner: "coder"} }

// coderDefault is root's session "default" of the agent coder.
func coderDefault() layout.Ref {
	return layout.Ref{Container: layout.Container{Home: "home/0", Kind: abi.KindAgent, Owner: "coder"}, Name: "default"}
}

// do sends a raw request line and returns every frame, or the refusal.
func (env *testEnv) do(c layout.Caller, t Target, line string) ([]*proto.Object, error) {
	req, err := proto.ParseRequest([]byte(line))
	if err != nil {
		return nil, err
	}
	r, err := env.e.Begin(context.Background(), c, t, req)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	frames, err := drain(r)
	env.e.derived.Flush("", false) // the store as the request left it, derived files too
	return frames, err
}

// stored reads a store file once the derived values waiting in memory
// are written (behind).
func (env *testEnv) stored(p string) string {
	env.t.Helper()
	env.e.derived.Flush("", false)
	b, err := os.ReadFile(p)
	if err != nil {
		env.t.Fatal(err)
	}
	return string(b)
}

func drain(r *Reply) ([]*proto.Object, error) {
	var out []*proto.Object
	for {
		f, err := r.Next(context.Background())
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, f)
	}
}

// send is do for a send that must be accepted.
func (env *testEnv) send(c layout.Caller, t Target, line string) []*proto.Object {
	env.t.Helper()
	frames, err := env.do(c, t, line)
	if err != nil {
		env.t.Fatalf("%s: %v", line, err)
	}
	return frames
}

func types(frames []*proto.Object) string {
	var ts []string
	for _, f := range frames {
		ts = append(ts, f.Str("type"))
	}
	return strings.Join(ts, ",")
}

func (env *testEnv) sessDir(home, agent, name string) string {
	return filepath.Join(env.store, home, "agent", agent, "session", name)
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// settledTree is the store byte for byte once every loaded index has
// written its list: an index writes index/list from its own goroutine
// after a change (at once after a quiet second), so a snapshot taken
// right after a send may be taken before it lands, and its landing then
// reads as a write of whatever the test does next.
func (env *testEnv) settledTree() map[string]string {
	env.t.Helper()
	lists := map[string][]byte{}
	env.e.indexes.Each(func(rel string, x *index.Index) {
		lists[filepath.Join(env.store, rel, "index", "list")] = x.ListBytes()
	})
	for file, want := range lists {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			got, err := os.ReadFile(file)
			if err == nil && string(got) == string(want) {
				break
			}
			if time.Now().After(deadline) {
				env.t.Fatalf("%s holds %q (%v), want %q", file, got, err, want)
			}
		}
	}
	return testkit.Snapshot(env.t, env.store, nil)
}
