package session

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/session/layout"
)

// TestValueFollowsEveryChange: the values the engine serves from memory
// are what the store holds after each kind of change the engine makes (a
// send, a value written, an append), and every change is announced to the
// watchers before the call that made it returns.
func TestValueFollowsEveryChange(t *testing.T) {
	env := newEnv(t)
	var mu sync.Mutex
	announced := map[string]int{}
	env.e.OnChange(func(rel string, _ Change) {
		mu.Lock()
		announced[rel]++
		mu.Unlock()
	})
	dir := "home/0/agent/coder/session/default"
	check := func(what string) {
		t.Helper()
		env.e.derived.Flush("", false) // derived values reach the store behind
		for _, f := range []string{abi.FileState, abi.FileCwd, abi.FileMeta, abi.FileCreatedAt, abi.FileUpdatedAt} {
			v, err := env.e.Value(dir + "/" + f)
			if err != nil {
				t.Fatalf("%s: Value(%s): %v", what, f, err)
			}
			if want := readFile(t, filepath.Join(env.store, dir, f)); string(v.Data) != want || v.Stat.Size != int64(len(want)) {
				t.Errorf("%s: %s from memory %q (size %d), store %q", what, f, v.Data, v.Stat.Size, want)
			}
		}
	}
	wasAnnounced := func(what string, files ...string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		for _, f := range files {
			if announced[dir+"/"+f] == 0 {
				t.Errorf("%s: %s was not announced", what, f)
			}
		}
		clear(announced)
	}
	env.send(root0, coder(), `{"op":"send","id":"c1","input":"hi"}`)
	check("after a send")
	wasAnnounced("a send", abi.FileState, abi.FileEvents, abi.FileMessages, abi.FileLatest)
	ref := coderDefault()
	for i, v := range []string{"done\n", "idle\n", "done\n"} {
		testkit.Must(t, env.e.WriteFile(root0, ref, abi.FileState, []byte(v)))
		check(fmt.Sprintf("after state write %d", i))
		wasAnnounced("a state write", abi.FileState, abi.FileEvents)
	}
	testkit.Must(t, env.e.WriteFile(root0, ref, abi.FileCwd, []byte("/elsewhere\n")))
	testkit.Must(t, env.e.WriteFile(root0, ref, abi.FileMeta, []byte(`{"client":"ctx","scope":"private","name":"n"}`)))
	check("after cwd and meta.json")
	wasAnnounced("cwd and meta.json", abi.FileCwd, abi.FileMeta)
	testkit.Must(t, env.e.AppendLog(root0, ref, abi.FileMessages, []byte(`{"role":"assistant","content":"a"}`+"\n")))
	check("after an append")
	wasAnnounced("an append", abi.FileMessages, abi.FileLatest)
}

// TestAppendAnnouncedAsItCame: an append through this host's mount is
// announced as Written (the kernel that sent the WRITE marks the log
// stale itself), one relayed from another host's mount as Changed (no
// kernel here saw it: the mount must mark what it holds stale), both
// before the call returns.
func TestAppendAnnouncedAsItCame(t *testing.T) {
	env := newEnv(t)
	env.send(root0, coder(), `{"op":"send","id":"c1","input":"hi"}`)
	ref := coderDefault()
	msgs := ref.Rel() + "/" + abi.FileMessages
	var mu sync.Mutex
	var got []Change
	env.e.OnChange(func(rel string, how Change) {
		if rel == msgs {
			mu.Lock()
			got = append(got, how)
			mu.Unlock()
		}
	})
	line := []byte(`{"role":"user","content":"by hand"}` + "\n")
	for _, c := range []struct {
		what   string
		append func(layout.Caller, layout.Ref, string, []byte) error
		want   Change
	}{
		{"through the mount", env.e.AppendLog, Written},
		{"relayed", env.e.AppendRelayed, Changed},
	} {
		testkit.Must(t, c.append(root0, ref, abi.FileMessages, line))
		mu.Lock()
		if len(got) != 1 || got[0] != c.want {
			t.Errorf("an append %s was announced %v, want once as %v", c.what, got, c.want)
		}
		got = nil
		mu.Unlock()
	}
}
