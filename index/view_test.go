package index

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestViewChangesNothing: a View (a follower's index of a store another
// server writes) serves what the store holds, order, current and entries,
// and changes nothing there: no index/ made for a container that has
// none, no leftover removed, no dangling entry dropped, no list written;
// every change is EROFS.
func TestViewChangesNothing(t *testing.T) {
	dir := newContainer(t, "a", "b", "c")
	x := load(t, dir)
	testkit.Must(t, x.SetCurrent("b"))
	testkit.Must(t, x.SetEntry(abi.IndexByHash, "k1", "a"))
	testkit.Must(t, x.Close())
	idx := filepath.Join(dir, dirName)
	testkit.Must(t, os.WriteFile(filepath.Join(idx, abi.IndexByHash, "k2"), []byte("gone\n"), 0o600))
	testkit.Must(t, os.WriteFile(filepath.Join(idx, abi.IndexByHash, ".k3.tmp-0123456789abcdef"), []byte("a\n"), 0o600))
	bare := newContainer(t, "d")

	r, err := storefs.Open(filepath.Dir(dir))
	testkit.Must(t, err)
	defer r.Close()
	before := testkit.Snapshot(t, filepath.Dir(dir), nil)
	v, err := View(r.ReadOnly(), filepath.Base(dir))
	testkit.Must(t, err)
	if got, want := string(v.ListBytes()), "c\nb\na\n"; got != want {
		t.Errorf("list: %q, want %q", got, want)
	}
	if v.Current() != "b" {
		t.Errorf("current: %q, want b", v.Current())
	}
	if n, err := v.Lookup(abi.IndexByHash, "k1"); n != "a" || err != nil {
		t.Errorf("by-hash/k1: %q %v", n, err)
	}
	if _, err := v.Lookup(abi.IndexByHash, "k2"); err == nil {
		t.Errorf("by-hash/k2 names a missing session and is served")
	}
	testkit.WantErrno(t, "set current in a view", v.SetCurrent("a"), syscall.EROFS)
	testkit.WantErrno(t, "touch in a view", v.Touch("a", "/tmp"), syscall.EROFS)
	testkit.WantErrno(t, "remove entry in a view", v.RemoveEntry(abi.IndexByHash, "k1"), syscall.EROFS)
	testkit.Must(t, v.Close())
	testkit.Same(t, "a view of an index", before, testkit.Snapshot(t, filepath.Dir(dir), nil))

	rb, err := storefs.Open(filepath.Dir(bare))
	testkit.Must(t, err)
	defer rb.Close()
	v, err = View(rb.ReadOnly(), filepath.Base(bare))
	testkit.Must(t, err)
	if got := string(v.ListBytes()); got != "d\n" {
		t.Errorf("list of a container without index/: %q", got)
	}
	if _, err := os.Lstat(filepath.Join(bare, dirName)); !os.IsNotExist(err) {
		t.Errorf("a view made index/: %v", err)
	}
}

// TestViewPending: what a running writer's journal holds is laid over the
// store's files (current replaced, an entry added that its directory does
// not hold yet, one removed), a pending value naming no session is not
// served, and nothing is written.
func TestViewPending(t *testing.T) {
	dir := newContainer(t, "a", "b", "c")
	x := load(t, dir)
	testkit.Must(t, x.SetCurrent("b"))
	testkit.Must(t, x.SetEntry(abi.IndexByHash, "k1", "a"))
	testkit.Must(t, x.Close())
	r, err := storefs.Open(filepath.Dir(dir))
	testkit.Must(t, err)
	defer r.Close()
	ct := filepath.Base(dir)
	idx := ct + "/" + dirName
	before := testkit.Snapshot(t, filepath.Dir(dir), nil)
	v, err := ViewPending(r.ReadOnly(), ct, Pending{
		idx + "/" + currentFile:              []byte("c\n"),
		idx + "/" + abi.IndexByHash + "/k1":  nil,
		idx + "/" + abi.IndexByHash + "/k2":  []byte("a\n"),
		idx + "/" + abi.IndexByHash + "/k3":  []byte("nosuch\n"),
		idx + "/" + abi.IndexByCwd + "/../x": []byte("a\n"),
	})
	testkit.Must(t, err)
	if v.Current() != "c" {
		t.Errorf("current: %q, want the pending c", v.Current())
	}
	if n, err := v.Lookup(abi.IndexByHash, "k1"); err == nil {
		t.Errorf("by-hash/k1, removed in the journal, is served: %q", n)
	}
	if n, err := v.Lookup(abi.IndexByHash, "k2"); n != "a" || err != nil {
		t.Errorf("by-hash/k2, only in the journal: %q %v", n, err)
	}
	if n, err := v.Lookup(abi.IndexByHash, "k3"); err == nil {
		t.Errorf("by-hash/k3 names no session and is served: %q", n)
	}
	testkit.Same(t, "a view with values pending", before, testkit.Snapshot(t, filepath.Dir(dir), nil))
}
