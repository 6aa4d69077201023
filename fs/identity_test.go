package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestListingThenChangeExact: a listing of a session (READDIRPLUS) hands
// the kernel the attributes of logs it knows already, through node
// objects go-fuse then drops for the ones it holds; the next change of a
// log (an event a state write appends) must still reach the kernel: a
// stat right after it shows the store's size. On the old tree the stat
// showed the size from the listing (issue 20).
func TestListingThenChangeExact(t *testing.T) {
	v := mountEnv(t)
	v.session()
	events := sessRel + "/events.jsonl"
	exact := func(what string) {
		t.Helper()
		st, err := os.Stat(v.p(events))
		testkit.Must(t, err)
		want, err := os.ReadFile(filepath.Join(v.store, events))
		testkit.Must(t, err)
		if st.Size() != int64(len(want)) {
			t.Fatalf("%s: stat shows %d bytes, the store holds %d", what, st.Size(), len(want))
		}
		if got := v.read(events); got != string(want) {
			t.Fatalf("%s: read %d bytes, the store holds %d", what, len(got), len(want))
		}
	}
	exact("first look") // the kernel knows the log's inode
	for i, state := range []string{"done", "idle", "done", "idle"} {
		testkit.Must(t, os.WriteFile(v.p(sessRel+"/state"), []byte(state+"\n"), 0))
		// The state write announced the event it appended and marked the
		// kernel's attributes stale; nothing has asked for them since.
		_, err := os.ReadDir(v.p(sessRel)) // READDIRPLUS: attributes again
		testkit.Must(t, err)
		testkit.Must(t, os.WriteFile(v.p(sessRel+"/state"), []byte(state+"\n"), 0))
		exact(fmt.Sprintf("round %d: a change right after a listing", i))
	}
}

// TestIdentitiesShared: node objects of one inode number share one
// identity while any holds it; once none does, its entry goes.
func TestIdentitiesShared(t *testing.T) {
	ids := newIdentities()
	a := ids.of(7, 1)
	if ids.of(7, 1) != a || ids.of(8, 1) == a {
		t.Fatal("one inode number, one identity; two numbers, two")
	}
	a.attrsGiven.Store(true)
	if !ids.of(7, 1).attrsGiven.Load() {
		t.Fatal("the mark is not shared")
	}
	runtime.KeepAlive(a)
	a = nil
	deadline := time.Now().Add(5 * time.Second)
	for ids.size() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d identities left with no node holding them", ids.size())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if ids.of(7, 1).attrsGiven.Load() {
		t.Fatal("an identity made afresh kept the old mark")
	}
}

// TestListingThenNewNameExact: the same for a directory the kernel keeps
// the listing of: a listing of its parent hands the kernel the session
// directory's attributes; when a run then first writes AGENTS.md there
// (a name the engine makes, not a MKDIR or CREATE the kernel saw), ls of
// the session shows it at once.
func TestListingThenNewNameExact(t *testing.T) {
	v := mountEnv(t)
	def := v.root + "/agent/coder.d"
	testkit.Must(t, os.MkdirAll(def, 0o755))
	testkit.Must(t, os.WriteFile(def+"/model", []byte("debug/echo\n"), 0o644))
	v.session()
	send := func(id string) {
		t.Helper()
		f, err := os.OpenFile(v.p(sessRel+"/ctl"), os.O_RDWR, 0)
		testkit.Must(t, err)
		defer f.Close()
		_, err = f.WriteString(`{"op":"send","id":"` + id + `","input":"hello"}` + "\n")
		testkit.Must(t, err)
		readAll(t, f)
	}
	names := func(rel string) []string {
		t.Helper()
		ents, err := os.ReadDir(v.p(rel))
		testkit.Must(t, err)
		var out []string
		for _, e := range ents {
			out = append(out, e.Name())
		}
		return out
	}
	send("c1")
	names(sessRel)               // the kernel keeps the session's listing
	send("c2")                   // state and latest.md: the session's attributes are marked stale
	names(agentRel + "/session") // READDIRPLUS: the session's attributes again
	testkit.Must(t, os.WriteFile(def+"/AGENTS.md", []byte("be brief\n"), 0o644))
	send("c3") // AGENTS.md appears in the session
	if got := names(sessRel); !slices.Contains(got, "AGENTS.md") {
		t.Fatalf("ls of the session right after a run first wrote AGENTS.md: %v", got)
	}
}
