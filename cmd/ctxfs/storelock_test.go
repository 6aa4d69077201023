package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/session/layout"
)

// refuseServedStore takes a lock held shared for a cluster's, and only
// that: a free store, and one held exclusive by no live server, are free.
// (A lock let go between its exclusive and its shared try, as another
// check's moment is, is tried again before it counts as a cluster's: a
// window of microseconds, which no test here hits at will.)
func TestRefuseServedStoreShared(t *testing.T) {
	store := t.TempDir()
	st, err := storefs.Open(store)
	testkit.Must(t, err)
	defer st.Close()
	if err := refuseServedStore(st); err != nil {
		t.Fatalf("a free store: %v", err)
	}
	hold := func(how int) *os.File {
		f, err := os.OpenFile(filepath.Join(store, ".ctxfs.lock"), os.O_RDWR, 0)
		testkit.Must(t, err)
		testkit.Must(t, unix.Flock(int(f.Fd()), how))
		return f
	}
	shared := hold(unix.LOCK_SH)
	if err := refuseServedStore(st); err == nil || !strings.Contains(err.Error(), "hosts of a cluster") {
		t.Errorf("a store held shared: %v, want the cluster's", err)
	}
	shared.Close()

	// Held exclusive by no server (a check's moment, a dead holder's
	// file): not a cluster's, and no live server is named.
	moment := hold(unix.LOCK_EX)
	if err := refuseServedStore(st); err != nil {
		t.Errorf("a store held exclusive by no server: %v", err)
	}
	moment.Close()
}

// fsck --repair holds the store lock while it repairs, and refuses a store
// whose lock another process holds exclusive, whether or not it wrote its
// pid (a server starting writes it after it took the lock). Before, such
// a store passed the check for a live holder and was repaired beside it,
// and a mount that started during a repair found the store free: both
// would replay one journal at once.
func TestFsckRepairHoldsTheLock(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	made, err := layout.OpenStore(store)
	testkit.Must(t, err)
	made.Close()
	l, err := os.OpenFile(filepath.Join(store, ".ctxfs.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	testkit.Must(t, err)
	testkit.Must(t, unix.Flock(int(l.Fd()), unix.LOCK_EX))
	if code := runFsck(store, true); code != 2 {
		t.Errorf("fsck --repair of a store locked by another process: exit %d, want 2", code)
	}
	l.Close()

	held, err := holdStoreForRepair(store)
	testkit.Must(t, err)
	st, err := storefs.Open(store)
	testkit.Must(t, err)
	defer st.Close()
	if unix.Flock(int(mustOpenLock(t, st).Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
		t.Errorf("the store lock is free while a repair holds it")
	}
	held.Close()
	if code := runFsck(store, true); code != 0 {
		t.Errorf("fsck --repair of a free empty store: exit %d, want 0", code)
	}
}

func mustOpenLock(t *testing.T, st *storefs.Root) *os.File {
	l, err := openStoreLock(st)
	testkit.Must(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}
