package session

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/search"
	"github.com/ctxfs/ctxfs/session/layout"
)

// remembered runs a search that must be answered from what earlier
// searches found (no session's index opened), and returns its matches.
func (env *testEnv) remembered(q string) []string {
	env.t.Helper()
	before := search.Remembered()
	got, _ := env.found(root0, searchLine(q))
	if search.Remembered() == before {
		env.t.Fatalf("%q: not answered from memory", q)
	}
	return got
}

// warmUp searches until the answer comes from memory: the first search
// builds the index, the second checks it and remembers it.
func (env *testEnv) warmUp(q string) []string {
	env.t.Helper()
	env.found(root0, searchLine(q))
	env.found(root0, searchLine(q))
	return env.remembered(q)
}

// TestSearchRememberedNeverStale: what a search remembers of a session's
// index is never trusted once the session, its log or its index changed
// in any way, through the engine or behind it.
func TestSearchRememberedNeverStale(t *testing.T) {
	env := newEnv(t)
	env.sendTo(root0, "s1", "我们今天讨论文件系统")
	env.sendTo(root0, "s2", "文件很大")
	want := env.warmUp("文件")
	if len(want) != 4 {
		t.Fatalf("found %q", want)
	}
	wantFound(t, "nothing changed", env.remembered("文件"), want...)
	wantFound(t, "absent, from memory", env.remembered("鳕鱼肝油"))

	// Appended after it was remembered (the session loaded, and not).
	env.sendTo(root0, "s1", "鳕鱼肝油")
	wantFound(t, "appended", found(env, "鳕鱼肝油"), "s1 user 鳕鱼肝油", "s1 assistant 鳕鱼肝油")
	ref := layout.Ref{Container: layout.Container{Home: "home/0", Kind: "agent", Owner: "coder"}, Name: "s2"}
	env.warmUp("鳕鱼肝油")
	testkit.Must(t, env.e.AppendLog(root0, ref, "messages.jsonl", []byte(`{"role":"user","content":"鳕鱼肝油 again"}`+"\n")))
	wantFound(t, "appended by AppendLog", found(env, "鳕鱼肝油"), "s1 user 鳕鱼肝油", "s1 assistant 鳕鱼肝油", "s2 user 鳕鱼肝油 again")

	// A segment's filter cleared in place, its header kept.
	env.warmUp("文件")
	seg := filepath.Join(env.store, "home/0/.search/agent/coder/s2/0")
	b := []byte(readFile(t, seg))
	clear(b[64:])
	f, err := os.OpenFile(seg, os.O_WRONLY, 0)
	testkit.Must(t, err)
	_, err = f.WriteAt(b, 0)
	testkit.Must(t, err)
	testkit.Must(t, f.Close())
	wantFound(t, "a segment cleared", found(env, "文件"), want...)

	// A segment cut under its mapping: no fault reaches the server.
	env.warmUp("文件")
	testkit.Must(t, os.Truncate(seg, 64))
	wantFound(t, "a segment cut", found(env, "文件"), want...)

	// A session archived, then made again at the same place.
	env.warmUp("文件")
	testkit.Must(t, env.e.Archive(ref, layout.PrivateOwner(0, 0), false))
	wantFound(t, "archived", found(env, "文件"), want[:2]...)
	env.warmUp("文件")
	env.sendTo(root0, "s2", "新的")
	wantFound(t, "made again", found(env, "文件"), want[:2]...)
	wantFound(t, "made again: its text", found(env, "新的"), "s2 user 新的", "s2 assistant 新的")

	// The whole index removed behind the server.
	env.warmUp("文件")
	testkit.Must(t, os.RemoveAll(filepath.Join(env.store, "home/0/.search")))
	wantFound(t, "index removed", found(env, "文件"), want[:2]...)
}

func found(env *testEnv, q string) []string {
	env.t.Helper()
	got, _ := env.found(root0, searchLine(q))
	return got
}

// TestSearchRememberedConcurrent: searches at once, between appends,
// each find what was appended before they began.
func TestSearchRememberedConcurrent(t *testing.T) {
	env := newEnv(t)
	for _, s := range []string{"s1", "s2", "s3"} {
		env.sendTo(root0, s, "起点 "+s)
	}
	env.warmUp("起点")
	ref := layout.Ref{Container: layout.Container{Home: "home/0", Kind: "agent", Owner: "coder"}, Name: "s2"}
	for i := range 20 {
		word := fmt.Sprintf("标记%d号", i)
		testkit.Must(t, env.e.AppendLog(root0, ref, "messages.jsonl", []byte(`{"role":"user","content":"`+word+`"}`+"\n")))
		var wg sync.WaitGroup
		got := make([][]string, 3)
		for j := range got {
			wg.Go(func() { got[j], _ = env.found(root0, searchLine(word)) })
		}
		wg.Wait()
		for _, g := range got {
			wantFound(t, word, g, "s2 user "+word)
		}
	}
}
