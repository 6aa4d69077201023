package engswitch

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/cluster/replica"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/session"
)

const state = "home/1000/agent/coder/session/s/state"

// newStore makes a store holding one session whose state is value, and a
// follower's view of it (a real engine of the mount, over real files).
func newStore(t *testing.T, value string) (string, *replica.Replica) {
	t.Helper()
	store := t.TempDir()
	testkit.Must(t, os.Chmod(store, 0o700)) // as its writer keeps it
	testkit.Must(t, os.MkdirAll(filepath.Join(store, filepath.Dir(state)), 0o700))
	testkit.Must(t, os.WriteFile(filepath.Join(store, state), []byte(value), 0o600))
	r, err := replica.Open(store, "/mnt", nil)
	testkit.Must(t, err)
	t.Cleanup(func() { r.Close() })
	return store, r
}

// heard collects the changes a watcher is told of.
type heard struct {
	mu   sync.Mutex
	rels []string
}

func (h *heard) hear(rel string, _ session.Change) {
	h.mu.Lock()
	h.rels = append(h.rels, rel)
	h.mu.Unlock()
}

func (h *heard) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.rels)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
	}
}

// TestSwitchServesAThenB: calls are answered by the engine installed when
// they are made; the watchers registered with the switch hear the changes
// of the engine installed, and no longer those of one taken away.
func TestSwitchServesAThenB(t *testing.T) {
	storeA, a := newStore(t, "idle\n")
	storeB, b := newStore(t, "done\n")
	s := New(a)
	var mount heard
	s.OnChange(mount.hear)
	var fromA heard
	a.OnChange(fromA.hear)

	if v, err := s.Value(state); err != nil || string(v.Data) != "idle\n" {
		t.Fatalf("served by A: %q %v", v.Data, err)
	}
	testkit.Must(t, os.WriteFile(filepath.Join(storeA, state), []byte("active\n"), 0o600))
	waitFor(t, "A's change reaches the switch's watcher", func() bool { return mount.count() == 1 })

	s.Set(b)
	if s.Current() != b {
		t.Fatalf("Current after Set(B): %v", s.Current())
	}
	if v, err := s.Value(state); err != nil || string(v.Data) != "done\n" {
		t.Fatalf("served by B: %q %v", v.Data, err)
	}
	a.Value(state) // A watches its state again, as if asked
	testkit.Must(t, os.WriteFile(filepath.Join(storeA, state), []byte("idle again\n"), 0o600))
	waitFor(t, "A announces its change", func() bool { return fromA.count() == 2 })
	if n := mount.count(); n != 1 {
		t.Errorf("a change of A, taken away, reached the switch's watcher (%d changes heard, want 1)", n)
	}
	testkit.Must(t, os.WriteFile(filepath.Join(storeB, state), []byte("interrupted\n"), 0o600))
	waitFor(t, "B's change reaches the switch's watcher", func() bool { return mount.count() == 2 })

	s.Set(a) // back to A: a new installation, heard again
	testkit.Must(t, os.WriteFile(filepath.Join(storeA, state), []byte("active\n"), 0o600))
	waitFor(t, "A's change, installed again, reaches the switch's watcher", func() bool { return mount.count() == 3 })
	if v, err := s.Value(state); err != nil || string(v.Data) != "active\n" {
		t.Errorf("served by A again: %q %v", v.Data, err)
	}
}
