package storefs

import (
	"os"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
	"golang.org/x/sys/unix"
)

// TestReadOnlyRefusesEveryChange: a read-only Root (a follower's view of
// a store another server writes) answers EROFS to every change, through
// its As copies too, and writes nothing, not even the ways' probe; it
// reads as the Root it came from.
func TestReadOnlyRefusesEveryChange(t *testing.T) {
	f := newFixture(t)
	ro := f.r.ReadOnly()
	before := testkit.Snapshot(t, f.store, nil)
	own := Owner{Uid: -1, Gid: -1, DirMode: 0o700, FileMode: 0o600}
	changes := map[string]func(r *Root) error{
		"open for writing": func(r *Root) error { _, err := r.OpenFile("home/1000/a/file", os.O_WRONLY|os.O_APPEND, 0); return err },
		"open to truncate": func(r *Root) error { _, err := r.OpenFile("home/1000/a/file", os.O_RDONLY|os.O_TRUNC, 0); return err },
		"create":           func(r *Root) error { _, err := r.OpenFile("home/1000/a/new", os.O_RDWR|os.O_CREATE, 0o600); return err },
		"replace":          func(r *Root) error { return r.ReplaceFile("home/1000/a/file", []byte("x\n"), own, SyncAll) },
		"mkdir":            func(r *Root) error { return r.Mkdir("home/1000/b", 0o700) },
		"mkdir owned":      func(r *Root) error { return r.MkdirOwned("home/1000/b", own) },
		"remove":           func(r *Root) error { return r.Remove("home/1000/a/file") },
		"remove all":       func(r *Root) error { return r.RemoveAll("home/1000/a") },
		"rmdir":            func(r *Root) error { return r.RemoveDir("home/1000/a") },
		"rename":           func(r *Root) error { return r.Rename("home/1000/a/file", "home/1000/a/moved", 0) },
		"move":             func(r *Root) error { return r.Move("home/1000/a/file", "home/1000/a/moved") },
		"link":             func(r *Root) error { return r.Link("home/1000/a/file", "home/1000/a/linked") },
		"symlink":          func(r *Root) error { return r.Symlink("file", "home/1000/a/sym") },
		"mknod":            func(r *Root) error { return r.Mknod("home/1000/a/fifo", unix.S_IFIFO|0o600, 0) },
		"chmod":            func(r *Root) error { return r.Chmod("home/1000/a/file", 0o644) },
		"chmod the store":  func(r *Root) error { return r.Chmod(".", 0o755) },
		"chown":            func(r *Root) error { return r.Chown("home/1000/a/file", 1000, 1000) },
		"utimes": func(r *Root) error {
			return r.Utimes("home/1000/a/file", [2]unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Sec: 1}})
		},
		"record ways": func(r *Root) error { return r.RecordWays() },
	}
	for what, change := range changes {
		for _, r := range []*Root{ro, ro.As(Cred{Uid: 1000, Gid: 1000}), ro.ShowAs("/mnt")} {
			testkit.WantErrno(t, what, change(r), syscall.EROFS)
		}
	}
	ro.Ways()
	ro.RemoveTemps("home/1000/a", func(string) bool { return true })
	testkit.Same(t, "changes through a read-only root", before, testkit.Snapshot(t, f.store, nil))
	if b, err := ro.ReadFile("home/1000/a/file", 100); err != nil || string(b) != "mine\n" {
		t.Errorf("read through a read-only root: %q %v", b, err)
	}
	if _, err := f.r.OpenFile("home/1000/a/file", os.O_WRONLY|os.O_APPEND, 0); err != nil {
		t.Errorf("the Root a read-only one came from still writes: %v", err)
	}
}
