package session

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/session/archive"
	"github.com/ctxfs/ctxfs/session/layout"
)

// TestDeleteArchivedRacing: deletes of one archived session racing each
// other delete it once: one succeeds, every other is ENOENT, and its bytes
// of history are given back once (its count is the store's after).
func TestDeleteArchivedRacing(t *testing.T) {
	env := newEnv(t)
	u := layout.Caller{Uid: 1001, Gid: 1001}
	env.send(u, coder(), `{"op":"send","id":"c1","session":"old","input":"an archived session's history"}`)
	env.send(u, coder(), `{"op":"send","id":"c2","session":"live","input":"the current one"}`)
	ref := layout.Ref{Container: layout.Container{Home: "home/1001", Kind: abi.KindAgent, Owner: "coder"}, Name: "old"}
	testkit.Must(t, env.e.Archive(ref, layout.PrivateOwner(1001, 1001), false))
	history := env.e.Limits().History
	held, archived := history.Held("home/1001"), env.e.historyBytes(archive.Target(ref))
	if archived == 0 || held != env.e.historyOf("home/1001") {
		t.Fatalf("before: %d bytes held, %d counted in the store, the archive's %d", held, env.e.historyOf("home/1001"), archived)
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = env.e.DeleteArchived(ref) }()
	}
	wg.Wait()
	deleted := 0
	for _, err := range errs {
		switch {
		case err == nil:
			deleted++
		case !errors.Is(err, syscall.ENOENT):
			t.Errorf("a racing delete: %v, want ENOENT", err)
		}
	}
	if deleted != 1 {
		t.Errorf("%d deletes succeeded, want 1", deleted)
	}
	if got, store := history.Held("home/1001"), env.e.historyOf("home/1001"); got != held-archived || got != store {
		t.Errorf("after: %d bytes held, want %d, the store's %d", got, held-archived, store)
	}
	if ents, err := os.ReadDir(filepath.Join(env.store, "home/1001", abi.ArchivedDir, "coder")); err != nil || len(ents) != 0 {
		t.Errorf("the archive's directory after the deletes: %v %v", ents, err)
	}
}
