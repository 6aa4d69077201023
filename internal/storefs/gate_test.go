package storefs

import (
	"os"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
	"golang.org/x/sys/unix"
)

// A closed gate refuses every change, through the Root it was set on and
// every Root derived from it, with the gate's errno, and changes nothing;
// reads go on. Reopened, changes work again.
func TestGateRefusesEveryChange(t *testing.T) {
	f := newFixture(t)
	var closed bool
	f.r.SetGate(func() error {
		if closed {
			return syscall.EAGAIN
		}
		return nil
	})
	shown := f.r.ShowAs("/mnt")
	user := f.r.As(Cred{Uid: 1000, Gid: 1000})
	f.r.Ways() // the probe's scratch comes and goes before
	closed = true
	before := testkit.Snapshot(t, f.store, nil)
	own := Owner{Uid: -1, Gid: -1, DirMode: 0o700, FileMode: 0o600}
	changes := map[string]func() error{
		"create": func() error {
			_, err := f.r.OpenFile("home/1000/a/new", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			return err
		},
		"open for writing": func() error {
			_, err := shown.OpenFile("home/1000/a/file", os.O_WRONLY|os.O_TRUNC, 0)
			return err
		},
		"rename":      func() error { return f.r.Rename("home/1000/a/file", "home/1000/a/moved", 0) },
		"move":        func() error { return shown.Move("home/1000/a/file", "home/1000/a/moved") },
		"swap":        func() error { return f.r.Swap("home/1000/a/file", "home/1000/a/file") },
		"link":        func() error { return f.r.Link("home/1000/a/file", "home/1000/a/linked") },
		"symlink":     func() error { return user.Symlink("x", "home/1000/a/sym") },
		"mknod":       func() error { return f.r.Mknod("home/1000/a/fifo", unix.S_IFIFO|0o600, 0) },
		"remove":      func() error { return user.Remove("home/1000/a/file") },
		"rmdir":       func() error { return f.r.RemoveDir("home/1000/a") },
		"remove all":  func() error { return f.r.RemoveAll("home/1000") },
		"mkdir":       func() error { return f.r.Mkdir("home/1000/b", 0o700) },
		"mkdir owned": func() error { return f.r.MkdirOwned("home/1000/b", own) },
		"replace":     func() error { return shown.ReplaceFile("home/1000/a/file", []byte("new\n"), own, SyncAll) },
		"chmod":       func() error { return f.r.Chmod("home/1000/a/file", 0o644) },
		"chown":       func() error { return f.r.Chown("home/1000/a/file", 1000, 1000) },
		"utimes": func() error {
			return f.r.Utimes("home/1000/a/file", [2]unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Sec: 1}})
		},
	}
	for what, change := range changes {
		testkit.WantErrno(t, what, change(), syscall.EAGAIN)
	}
	testkit.Same(t, "changes through a closed gate", before, testkit.Snapshot(t, f.store, nil))
	if b, err := shown.ReadFile("home/1000/a/file", 100); err != nil || string(b) != "mine\n" {
		t.Fatalf("read through a closed gate: %q %v", b, err)
	}
	closed = false
	testkit.Must(t, shown.Symlink("x", "home/1000/a/sym"))
	user.ShutGate() // for good, whatever the gate's function says
	testkit.WantErrno(t, "mkdir through a shut gate", f.r.Mkdir("home/1000/c", 0o700), syscall.EAGAIN)
}
