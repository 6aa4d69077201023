package session

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/proto"
)

// testEngine opens an engine on a fresh store with a root holding the
// given agent definitions (name → files of NAME.d).
type testEnv struct {
	t     testing.TB
	e     *Engine
	store string
	root  string
}

func newEnv(t *testing.T) *testEnv { return newEnvTB(t) }

func newEnvTB(t testing.TB) *testEnv {
	t.Helper()
	base := t.TempDir()
	env := &testEnv{t: t, store: filepath.Join(base, "store"), root: filepath.Join(base, "root")}
	env.define("coder", map[string]string{"model": "debug/echo"})
	env.open()
	return env
}

func (env *testEnv) open() {
	e, err := Open(Config{Store: env.store, Root: env.root})
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
	must(env.t, os.MkdirAll(d, 0o755))
	for f, v := range files {
		if f == "program" {
			must(env.t, os.WriteFile(filepath.Join(env.root, "agent", name), []byte(v), 0o755))
			continue
		}
		must(env.t, os.MkdirAll(filepath.Dir(filepath.Join(d, f)), 0o755))
		must(env.t, os.WriteFile(filepath.Join(d, f), []byte(v), 0o644))
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var root0 = Caller{Uid: 0, Gid: 0, Pid: os.Getpid()}

func coder() Target { return Target{Kind: KindAgent, Owner: "coder"} }

// do sends a raw request line and returns every frame, or the refusal.
func (env *testEnv) do(c Caller, t Target, line string) ([]*proto.Object, error) {
	req, err := proto.ParseRequest([]byte(line))
	if err != nil {
		return nil, err
	}
	r, err := env.e.Begin(context.Background(), c, t, req)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return drain(r)
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
func (env *testEnv) send(c Caller, t Target, line string) []*proto.Object {
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

// tree is every file and directory under dir with its mode and content
// hash, for "nothing was written" checks (byte for byte).
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return nil
		}
		v := info.Mode().String()
		if info.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			v += fmt.Sprintf(" %x %d", sha256.Sum256(b), info.ModTime().UnixNano())
		}
		out[rel] = v
		return nil
	})
	return out
}

// sameTree fails the test with the differences between two trees.
func sameTree(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	var diffs []string
	for k, v := range before {
		if after[k] != v {
			diffs = append(diffs, "changed or removed: "+k)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			diffs = append(diffs, "added: "+k)
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Fatalf("%s wrote to the store:\n%s", what, strings.Join(diffs, "\n"))
	}
}

func wantErrno(t *testing.T, what string, err error, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got %v (errno %s), want %v", what, err, abi.ErrnoName(abi.Errno(err)), want)
	}
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
