package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// userFUSE mounts a FUSE filesystem of type fuse.NAME at dir for c,
// served by hangfs running as c: the mount fusermount3 makes for a user
// (nosuid, nodev, user_id and group_id c's, no allow_other) where
// /dev/fuse is 0666, as most distributions ship it (on this machine it
// is root's alone, so the test opens it and hands it over). It is taken
// away at cleanup.
func userFUSE(t *testing.T, c *cred, dir, name string) *proc {
	t.Helper()
	hangfs := buildHangfs(t)
	testkit.Must(t, os.Chmod(filepath.Dir(hangfs), 0o755))
	dev, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	testkit.Must(t, err)
	defer dev.Close()
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=%d,group_id=%d", dev.Fd(), c.uid, c.gid)
	testkit.Must(t, syscall.Mount("hangfs", dir, "fuse."+name, syscall.MS_NOSUID|syscall.MS_NODEV, opts))
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	h := &proc{Cmd: exec.Command(hangfs, "/dev/fd/3", "-"), lines: make(chan string, 16)}
	h.ExtraFiles = []*os.File{dev}
	startAs(t, h, c)
	waitLine(t, h, "ready")
	return h
}

// A user's own FUSE mount says it is ctxfs (fuse.ctxfs) at DIR/home, and
// DIR/agent/.ctxfs.pid, where clean-stale looks for the server of DIR, is
// a FIFO of theirs: root's `ctxfs clean-stale` must neither wait on it
// for ever nor touch the user's live mount.
func TestCleanStaleUserFIFOPidFile(t *testing.T) {
	requireFUSE(t)
	base := t.TempDir()
	testkit.Must(t, os.Chmod(base, 0o755))
	openToAll(t, base+"/x")
	evil := filepath.Join(base, "evil")
	testkit.Must(t, os.Mkdir(evil, 0o755))
	testkit.Must(t, os.Chown(evil, int(owner.uid), int(owner.gid)))
	if out, err := bashAs(t, owner, "mkdir -p "+evil+"/home "+evil+"/agent && mkfifo "+evil+"/agent/.ctxfs.pid"); err != nil {
		t.Fatalf("as uid 1001: %v\n%s", err, out)
	}
	home := filepath.Join(evil, "home")
	userFUSE(t, owner, home, "ctxfs")
	if n := mountsAt(home); n != 1 {
		t.Fatalf("the user's mount at %s: %d mounts", home, n)
	}
	out, code := ctxfsCmd(t, "clean-stale", "--under", base)
	if code != 0 || out != "" {
		t.Errorf("clean-stale --under %s: exit %d, %q; want 0 and nothing cleaned", base, code, out)
	}
	if n := mountsAt(home); n != 1 {
		t.Errorf("the user's live mount was touched: %d mounts", n)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(evil, "agent", ".ctxfs.pid"), &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		t.Errorf("the user's FIFO: %v, mode %o", err, st.Mode)
	}
}
