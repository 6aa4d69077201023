package freetree

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/session/layout"
)

// TestFreeQuotaCount: a uid's use of the free trees is counted from the
// store the first time it is asked for: its inodes in its agents' root/,
// its sessions' context/ and the shared spaces' context/, a hard link
// once, others' inodes and the archive not at all; a bound passed is
// EDQUOT, and what is given back makes room again.
func TestFreeQuotaCount(t *testing.T) {
	env := newStore(t)
	mine := map[string]int{ // path → size, owned by 1001
		"home/1001/agent/coder/root":                                 -1,
		"home/1001/agent/coder/root/a":                               10000,
		"home/1001/agent/coder/root/d":                               -1,
		"home/1001/agent/coder/session/s1/context":                   -1,
		"home/1001/agent/coder/session/s1/context/c":                 1,
		"shared/team/agent/coder/session/t1/context/x":               5000,
		"home/1001/model/openai/gpt.d/session/m1/context/m":          3,
		"home/1001/archived_sessions/coder/old/context/not-counted":  70000,
		"home/1001/agent/coder/session/s1/not-free":                  80000,
		"shared/team/agent/coder/session/t1/context/theirs-not-mine": 90000,
	}
	var want, inodes int64
	for rel, size := range mine {
		p := filepath.Join(env.store, rel)
		testkit.Must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		if size < 0 {
			testkit.Must(t, os.MkdirAll(p, 0o755))
		} else {
			testkit.Must(t, os.WriteFile(p, make([]byte, size), 0o644))
		}
		owner := 1001
		if filepath.Base(rel) == "theirs-not-mine" {
			owner = 1002
		}
		testkit.Must(t, os.Lchown(p, owner, owner))
		if c := layout.Classify(rel); owner == 1001 && (c.Kind == layout.PlaceFree || c.Kind == layout.PlaceFreeRoot) {
			var st unix.Stat_t
			testkit.Must(t, unix.Lstat(p, &st))
			want += quota.FreeCharge(&st)
			inodes++
		}
	}
	testkit.Must(t, os.Link(filepath.Join(env.store, "home/1001/agent/coder/root/a"), filepath.Join(env.store, "home/1001/agent/coder/root/d/b")))

	const bytesBound = 1 << 30
	q := quota.NewFreeQuota(bytesBound, inodes+1, env.tree.Count)
	if b, n := q.Use(1001); b != want || n != inodes {
		t.Fatalf("counted %d bytes in %d inodes, want %d in %d", b, n, want, inodes)
	}
	testkit.Must(t, q.Take(1001, 4096, 1))
	if err := q.Take(1001, 0, 1); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("an inode past the bound: %v, want EDQUOT", err)
	}
	q.Give(1001, 4096, 1)
	testkit.Must(t, q.Take(1001, 0, 1))
	if err := q.Take(1001, bytesBound, 0); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("bytes past the bound: %v, want EDQUOT", err)
	}
	if err := q.Take(0, 1<<62, 1<<40); err != nil {
		t.Fatalf("root is not counted: %v", err)
	}
}

// TestFreeQuotaWalkStops: the count of a uid past its inode bound stops
// there (the uid is over: refused), and once something is given back it
// is counted again from the store.
func TestFreeQuotaWalkStops(t *testing.T) {
	env := newStore(t)
	dir := filepath.Join(env.store, "home/1001/agent/coder/root")
	testkit.Must(t, os.MkdirAll(dir, 0o755))
	testkit.Must(t, os.Chown(dir, 1001, 1001))
	for i := 0; i < 20; i++ {
		p := filepath.Join(dir, string(rune('a'+i)))
		testkit.Must(t, os.WriteFile(p, nil, 0o644))
		testkit.Must(t, os.Chown(p, 1001, 1001))
	}
	q := quota.NewFreeQuota(1<<30, 5, env.tree.Count)
	if _, n := q.Use(1001); n != 6 {
		t.Fatalf("the walk counted %d inodes, want it to stop at the bound + 1 (6)", n)
	}
	if err := q.Take(1001, 0, 1); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("a create while over: %v", err)
	}
	for i := 0; i < 16; i++ {
		testkit.Must(t, os.Remove(filepath.Join(dir, string(rune('a'+i)))))
	}
	q.Give(1001, 0, 1)
	if _, n := q.Use(1001); n != 5 {
		t.Fatalf("counted again after a removal: %d inodes, want 5 (root/ and 4 files)", n)
	}
	if err := q.Take(1001, 0, 1); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("a create at the bound: %v", err)
	}
}

// store is a store directory and its free trees, for a test.
type store struct {
	store string
	tree  Tree
}

// newStoreQuota opens an empty store under t.TempDir(), whose free trees
// are bounded by q (nil: a test of the walk alone), counted by their walk.
// Every test of the package makes files of other uids: it needs root.
func newStoreQuota(t *testing.T, q *quota.FreeQuota) store {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (files of other uids)")
	}
	dir := filepath.Join(t.TempDir(), "store")
	root, err := layout.OpenStore(dir)
	testkit.Must(t, err)
	t.Cleanup(func() { root.Close() })
	s := store{store: dir, tree: New(root, q)}
	if q != nil {
		q.CountWith(s.tree.Count)
	}
	return s
}

func newStore(t *testing.T) store { return newStoreQuota(t, nil) }
