package tree

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/index"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/session/layout"
)

// storeOnly is an Engine that answers from the store files alone.
type storeOnly struct{ root *storefs.Root }

func (s storeOnly) EnsureHome(uid uint32) error { return nil }
func (s storeOnly) Index(ct layout.Container) (*index.Index, error) {
	return nil, syscall.ENOENT
}
func (s storeOnly) Stat(rel string) (*unix.Stat_t, error) { return s.root.Lstat(rel) }

// TestMayCreateAndRemove: the kernel's checks a writer makes for a
// change another host relays: the way searchable, the directory
// writable, and in a sticky directory only the name's or the directory's
// owner removes (EPERM), root passing every check.
func TestMayCreateAndRemove(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the store's files their owners")
	}
	dir := t.TempDir()
	mk := func(rel string, uid, gid int, mode os.FileMode) {
		p := filepath.Join(dir, rel)
		testkit.Must(t, os.MkdirAll(p, 0o700))
		testkit.Must(t, os.Chown(p, uid, gid))
		testkit.Must(t, os.Chmod(p, mode))
	}
	mk("shared", 0, 0, 0o755)
	mk("shared/s", 0, 50, 0o770|os.ModeSetgid)
	mk("shared/s/agent", 0, 50, 0o770|os.ModeSetgid)
	mk("shared/s/agent/coder", 0, 50, 0o770|os.ModeSetgid)
	mk("shared/s/agent/coder/session", 0, 50, 0o770|os.ModeSetgid|os.ModeSticky)
	mk("shared/s/agent/coder/session/mine", 1001, 50, 0o770)
	mk("shared/s/agent/coder/session/theirs", 1002, 50, 0o770)
	mk("home", 0, 0, 0o755)
	mk("home/1001", 1001, 1001, 0o700)
	mk("home/1001/agent", 1001, 1001, 0o700)
	mk("home/1001/agent/coder", 1001, 1001, 0o700)
	mk("home/1001/agent/coder/session", 1001, 1001, 0o700)
	root, err := storefs.Open(dir)
	testkit.Must(t, err)
	defer root.Close()
	tr := New(root, storeOnly{root})

	member := layout.Caller{Uid: 1001, Gid: 1001, Groups: []uint32{50}}
	stranger := layout.Caller{Uid: 1003, Gid: 1003}
	sessions := "shared/s/agent/coder/session/"
	testkit.Must(t, tr.MayCreate(member, sessions+"new"))
	testkit.WantErrno(t, "a stranger's mkdir in a space", tr.MayCreate(stranger, sessions+"new"), syscall.EACCES)
	testkit.WantErrno(t, "a stranger's mkdir in 1001's home", tr.MayCreate(stranger, "home/1001/agent/coder/session/new"), syscall.EACCES)
	testkit.WantErrno(t, "1001's mkdir of a home", tr.MayCreate(member, "home/1003"), syscall.EACCES)
	testkit.Must(t, tr.MayCreate(layout.Caller{}, "home/1003")) // root
	testkit.Must(t, tr.MayCreate(member, "home/1001/agent/coder/session/new"))
	testkit.WantErrno(t, "a mkdir below a missing directory", tr.MayCreate(member, "home/1001/agent/other/session/new"), syscall.ENOENT)

	testkit.Must(t, tr.MayRemove(member, sessions+"mine"))
	testkit.WantErrno(t, "a member's removal of another's name in a sticky directory", tr.MayRemove(member, sessions+"theirs"), syscall.EPERM)
	testkit.Must(t, tr.MayRemove(layout.Caller{}, sessions+"theirs"))
	testkit.WantErrno(t, "a stranger's removal in a space", tr.MayRemove(stranger, sessions+"mine"), syscall.EACCES)
	testkit.WantErrno(t, "a removal of a name not there", tr.MayRemove(member, sessions+"gone"), syscall.ENOENT)
}

// TestMaySetattr: the kernel's rules for a change of attributes a writer
// checks for a relayed one: a mode its owner's, an owner root's, a group
// its owner's to one of the owner's groups, times given their owner's and
// the present any writer's.
func TestMaySetattr(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the store's files their owners")
	}
	dir := t.TempDir()
	for _, d := range []struct {
		rel      string
		uid, gid int
		mode     os.FileMode
	}{
		{"shared", 0, 0, 0o755},
		{"shared/s", 0, 50, 0o770 | os.ModeSetgid},
		{"shared/s/agent", 0, 50, 0o770},
		{"shared/s/agent/coder", 0, 50, 0o770},
		{"shared/s/agent/coder/session", 0, 50, 0o770},
		{"shared/s/agent/coder/session/k", 1001, 50, 0o770},
	} {
		p := filepath.Join(dir, d.rel)
		testkit.Must(t, os.Mkdir(p, 0o700))
		testkit.Must(t, os.Chown(p, d.uid, d.gid))
		testkit.Must(t, os.Chmod(p, d.mode))
	}
	state := "shared/s/agent/coder/session/k/state"
	testkit.Must(t, os.WriteFile(filepath.Join(dir, state), []byte("idle\n"), 0o660))
	testkit.Must(t, os.Chown(filepath.Join(dir, state), 1001, 50))
	testkit.Must(t, os.Chmod(filepath.Join(dir, state), 0o660))
	root, err := storefs.Open(dir)
	testkit.Must(t, err)
	defer root.Close()
	tr := New(root, storeOnly{root})

	owner := layout.Caller{Uid: 1001, Gid: 1001, Groups: []uint32{50, 60}}
	member := layout.Caller{Uid: 1002, Gid: 1002, Groups: []uint32{50}}
	u32 := func(v uint32) *uint32 { return &v }
	then := &[2]unix.Timespec{{Sec: 1}, {Sec: 1}}
	for _, c := range []struct {
		what string
		c    layout.Caller
		a    SetAttr
		want syscall.Errno
	}{
		{"the owner's chmod", owner, SetAttr{Mode: u32(0o600)}, 0},
		{"a member's chmod", member, SetAttr{Mode: u32(0o600)}, syscall.EPERM},
		{"the owner's chown", owner, SetAttr{Uid: u32(1002)}, syscall.EPERM},
		{"the owner's chown to itself", owner, SetAttr{Uid: u32(1001)}, 0},
		{"root's chown", layout.Caller{}, SetAttr{Uid: u32(1002)}, 0},
		{"the owner's chgrp to its group", owner, SetAttr{Gid: u32(60)}, 0},
		{"the owner's chgrp to another group", owner, SetAttr{Gid: u32(70)}, syscall.EPERM},
		{"a member's chgrp to the group it has", member, SetAttr{Gid: u32(50)}, 0}, // no change asked
		{"a member's touch", member, SetAttr{Times: then, Now: true}, 0},
		{"a member's touch to a time", member, SetAttr{Times: then}, syscall.EPERM},
		{"the owner's touch to a time", owner, SetAttr{Times: then}, 0},
		{"a stranger's touch", layout.Caller{Uid: 1003, Gid: 1003}, SetAttr{Times: then, Now: true}, syscall.EACCES},
	} {
		err := tr.MaySetattr(c.c, state, c.a)
		if c.want == 0 {
			if err != nil {
				t.Errorf("%s: %v", c.what, err)
			}
			continue
		}
		testkit.WantErrno(t, c.what, err, c.want)
	}
}
