package storefs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
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

// TestMkdirOwnedBorn: a directory MkdirOwned makes for a user, in a
// directory only root may enter, is the user's from its first moment
// (bornAs: there is no window in which a kill leaves it root's), with
// the mode asked for; and the threads it ran on are root's again (what
// the server makes next, on many goroutines, is root's).
func TestMkdirOwnedBorn(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	f := newFixture(t)
	testkit.Must(t, os.Mkdir(f.store+"/rootonly", 0o700))
	own := Owner{Uid: 1001, Gid: 1002, DirMode: 0o700}
	var dirfd int
	var name string
	// The mkdir alone, without the chown MkdirOwned does after it.
	testkit.Must(t, f.r.at("mkdir", "rootonly/born", func(d int, n string) error {
		dirfd, name = d, n
		return bornAs(own, func() error { return unix.Mkdirat(dirfd, name, 0o700) })
	}))
	st, err := f.r.Lstat("rootonly/born")
	testkit.Must(t, err)
	if st.Uid != 1001 || st.Gid != 1002 {
		t.Errorf("born: owner %d:%d, want 1001:1002", st.Uid, st.Gid)
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				d := fmt.Sprintf("rootonly/u%d-%d", g, i)
				if err := f.r.MkdirOwned(d, own); err != nil {
					t.Errorf("MkdirOwned %s: %v", d, err)
					return
				}
				runtime.Gosched()
				if err := f.r.Mkdir(d+"/server", 0o700); err != nil {
					t.Errorf("Mkdir as the server: %v", err)
					return
				}
				st, err := f.r.Lstat(d + "/server")
				if err != nil || st.Uid != 0 || st.Gid != 0 {
					t.Errorf("made by the server after MkdirOwned: %v owner %d:%d, want 0:0", err, st.Uid, st.Gid)
					return
				}
				if st, err := f.r.Lstat(d); err != nil || st.Uid != 1001 || st.Gid != 1002 || st.Mode&0o7777 != 0o700 {
					t.Errorf("%s: %v owner %d:%d mode %o", d, err, st.Uid, st.Gid, st.Mode&0o7777)
					return
				}
			}
		}(g)
	}
	wg.Wait()
}

// threadState is what a credential switch changes on the current thread.
type threadState struct {
	fsuid, fsgid int
	groups       []uint32
	caps         [2]unix.CapUserData
}

// currentThread reads the current (locked) thread's threadState.
func currentThread(t *testing.T) threadState {
	st := threadState{fsuid: fsid(unix.SYS_SETFSUID), fsgid: fsid(unix.SYS_SETFSGID)}
	groups, err := threadGroups()
	testkit.Must(t, err)
	st.groups = groups
	h := capHeader
	testkit.Must(t, unix.Capget(&h, &st.caps[0]))
	return st
}

// TestSwitchThread: each way of switching a thread (dropTo for AsUser,
// becomeOwner for bornAs) gives it the ids, groups and effective
// capabilities it promises, leaves the rest as it was, and restore gives
// the thread back exactly as before.
func TestSwitchThread(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	type want struct {
		fsuid, fsgid int
		groups       []uint32 // nil: the thread's own
		dropCaps     bool     // no effective capability; else the thread's own
	}
	for _, tc := range []struct {
		name   string
		become func() (*threadCred, error)
		want   want
	}{
		{"user", func() (*threadCred, error) { return dropTo(Cred{Uid: 1001, Gid: 1002, Groups: []uint32{1003}}) },
			want{fsuid: 1001, fsgid: 1002, groups: []uint32{1003}, dropCaps: true}},
		{"user without groups", func() (*threadCred, error) { return dropTo(Cred{Uid: 1001, Gid: 1002}) },
			want{fsuid: 1001, fsgid: 1002, groups: []uint32{}, dropCaps: true}},
		{"owner", func() (*threadCred, error) { return becomeOwner(Owner{Uid: 1001, Gid: 1002}) },
			want{fsuid: 1001, fsgid: 1002}},
		{"owner's group only", func() (*threadCred, error) { return becomeOwner(Owner{Uid: -1, Gid: 1002}) },
			want{fsuid: 0, fsgid: 1002}},
		{"owner is the server", func() (*threadCred, error) { return becomeOwner(Owner{Uid: 0, Gid: -1}) },
			want{fsuid: 0, fsgid: 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			before := currentThread(t)
			s, err := tc.become()
			during := currentThread(t)
			restore(s)
			testkit.Must(t, err)
			after := currentThread(t)
			if !equalThreads(after, before) {
				t.Errorf("after restore: %+v, want %+v", after, before)
			}
			w := tc.want
			if w.groups == nil {
				w.groups = before.groups
			}
			caps := before.caps
			if w.dropCaps {
				caps[0].Effective, caps[1].Effective = 0, 0
			}
			if got := (threadState{w.fsuid, w.fsgid, w.groups, caps}); !equalThreads(during, got) {
				t.Errorf("switched: %+v, want %+v", during, got)
			}
		})
	}
}

// equalThreads says whether a and b are the same threadState.
func equalThreads(a, b threadState) bool {
	return a.fsuid == b.fsuid && a.fsgid == b.fsgid && a.caps == b.caps && slices.Equal(a.groups, b.groups)
}
