package storefs

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
	"golang.org/x/sys/unix"
)

// TestAsUser: a Root with uid 1001's identity creates, below directories
// only root may enter (the store's 0700), a file and a directory that are
// 1001's without a chown; it cannot create in a directory 1001 may not
// write, nor give a file away; and every thread the calls ran on is
// root's again afterwards (run many times over, on many goroutines, with
// root-only creates in between).
func TestAsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	f := newFixture(t)
	testkit.Must(t, os.Chmod(f.store, 0o700))
	testkit.Must(t, os.Chown(f.store+"/home/1000/a", 1001, 1001))
	testkit.Must(t, os.Mkdir(f.store+"/rootonly", 0o700))
	user := f.r.As(Cred{Uid: 1001, Gid: 1001})

	file, err := user.OpenFile("home/1000/a/new", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	testkit.Must(t, err)
	file.Close()
	testkit.Must(t, user.Mkdir("home/1000/a/dir", 0o750))
	for _, name := range []string{"new", "dir"} {
		st, err := f.r.Lstat("home/1000/a/" + name)
		testkit.Must(t, err)
		if st.Uid != 1001 || st.Gid != 1001 {
			t.Errorf("%s made as 1001 is owned by %d:%d", name, st.Uid, st.Gid)
		}
	}
	if _, err := user.OpenFile("home/1000/new", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); !errors.Is(err, unix.EACCES) {
		t.Errorf("create as 1001 in root's directory: %v, want EACCES", err)
	}
	if err := user.Chown("home/1000/a/new", 1002, -1); !errors.Is(err, unix.EPERM) {
		t.Errorf("chown to another uid as 1001: %v, want EPERM", err)
	}

	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				name := filepath.Join("rootonly", string(rune('a'+g)))
				user.Lstat("home/1000/a/new")
				user.Chmod("home/1000/a/new", 0o640)
				runtime.Gosched()
				file, err := f.r.OpenFile(name, os.O_WRONLY|os.O_CREATE, 0o600)
				if err != nil {
					t.Errorf("root's create after a user's calls: %v", err)
					return
				}
				file.Close()
				var st unix.Stat_t
				if unix.Fstatat(unix.AT_FDCWD, filepath.Join(f.store, name), &st, 0) != nil || st.Uid != 0 {
					t.Errorf("root's file is owned by %d", st.Uid)
					return
				}
			}
		}(g)
	}
	wg.Wait()
}

// BenchmarkAsUser is what acting as a user adds to each operation: the
// identity changed and put back around a call that does nothing.
func BenchmarkAsUser(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	c := Cred{Uid: 1001, Gid: 1001}
	for b.Loop() {
		if err := AsUser(c, func() error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}
