package integration

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestIndexEntryCreatedReadOnly: open(O_RDONLY|O_CREAT) of a by-hash or
// by-uuid entry that does not exist succeeds (SPEC 9 lets the name be
// created) but writes no value, so the index holds no entry. The reader's
// open took the copy's path, which never told the kernel so at its close:
// the name stayed in the kernel's cache for the hour of its entry, stat
// said it existed (size 0) while `ls` did not list it and the index held
// nothing. It goes at the close now, as a refused writer's does.
func TestIndexEntryCreatedReadOnly(t *testing.T) {
	s := newFuseServer(t)
	s.send("a", "a1", "hello")
	settle() // the index snapshot written after the send
	idx := s.mnt(sessRel("index"))
	for _, p := range []string{idx + "/by-hash/ghost", idx + "/by-uuid/6f1c2a8e-1b2c-4d5e-8f90-a1b2c3d4e5f6"} {
		before := storeSnapshot(t, s)
		f, err := os.OpenFile(p, os.O_RDONLY|os.O_CREATE, 0o600)
		testkit.Must(t, err)
		testkit.Must(t, f.Close())
		eventually(t, afterClose, "the name of an entry never written to go", func() bool {
			_, err := os.Stat(p)
			return os.IsNotExist(err)
		})
		_, err = os.Stat(p)
		testkit.WantErrno(t, "stat of an entry never written", err, syscall.ENOENT)
		time.Sleep(30 * time.Millisecond)
		testkit.Same(t, "the store after a read-only create", before, storeSnapshot(t, s))
	}
}
