package freetree

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/session/layout"
)

var (
	root0 = layout.Caller{Uid: 0, Gid: 0}
	user  = layout.Caller{Uid: 1001, Gid: 1001}
)

// mkdirs makes each directory of the store (rel), owned by uid:gid with
// mode.
func (s store) mkdirs(t *testing.T, uid, gid int, mode uint32, rels ...string) {
	t.Helper()
	for _, rel := range rels {
		p := filepath.Join(s.store, rel)
		testkit.Must(t, os.MkdirAll(p, 0o755))
		testkit.Must(t, os.Chown(p, uid, gid))
		testkit.Must(t, unix.Chmod(p, mode)) // os.Chmod drops 0o2000
	}
}

// The free trees' door refuses every path outside a free tree (ENOENT),
// whatever the call, before it charges anything, and changes nothing
// there: the FUSE projection can reach no log, seal or ABI file through
// it.
func TestChecksPlace(t *testing.T) {
	q := quota.NewFreeQuota(1<<30, 100, nil)
	s := newStoreQuota(t, q)
	sess := "home/1001/agent/coder/session/s1"
	free := "home/1001/agent/coder/root"
	// Everything is uid 1001's and open to it: only the place check can
	// refuse.
	s.mkdirs(t, 1001, 1001, 0o777, sess, sess+"/.seal", free)
	for rel, data := range map[string]string{sess + "/messages.jsonl": "{}\n", free + "/a": "a"} {
		p := filepath.Join(s.store, rel)
		testkit.Must(t, os.WriteFile(p, []byte(data), 0o666))
		testkit.Must(t, os.Chown(p, 1001, 1001))
	}
	bytes, inodes := q.Use(1001)
	before := testkit.Snapshot(t, s.store, nil)
	ft := s.tree
	log := sess + "/messages.jsonl"
	for what, err := range map[string]error{
		"lstat a log":       func() error { _, err := ft.Lstat(log); return err }(),
		"readlink a log":    func() error { _, err := ft.Readlink(log); return err }(),
		"list a session":    func() error { _, err := ft.ReadDir(sess); return err }(),
		"open a log":        func() error { _, err := ft.Open(user, log, os.O_WRONLY); return err }(),
		"create in session": func() error { _, err := ft.Create(user, sess+"/new", os.O_WRONLY, 0o644); return err }(),
		"truncate a log":    ft.Truncate(user, log, 0),
		"remove a log":      ft.Remove(user, log),
		"mkdir in session":  ft.Mkdir(user, sess+"/x", 0o755),
		"mknod in session":  ft.Mknod(user, sess+"/fifo", unix.S_IFIFO|0o644, 0),
		"symlink in sess":   ft.Symlink(user, "/etc/passwd", sess+"/l"),
		"rmdir the seal":    ft.RemoveDir(user, sess+"/.seal"),
		"rename out":        ft.Rename(user, free+"/a", log, 0),
		"rename in":         ft.Rename(user, log, free+"/b", 0),
		"link a log in":     ft.Link(user, log, free+"/l"),
		"setattr a log":     ft.Setattr(user, log, nil, chmod(0o666)),
		"chown to caller":   ft.GiveToCaller(root0, log),
		"the store's .seal": ft.Remove(user, sess+"/.seal"),
	} {
		testkit.WantErrno(t, what, err, syscall.ENOENT)
	}
	testkit.Same(t, "the refused calls", before, testkit.Snapshot(t, s.store, nil))
	if b, n := q.Use(1001); b != bytes || n != inodes {
		t.Errorf("the refused calls charged uid 1001: %d bytes in %d inodes, was %d in %d", b, n, bytes, inodes)
	}
}

// chmod is an Attrs that sets the mode.
type chmod uint32

func (m chmod) Apply(root *storefs.Root, rel string) error {
	return root.Chmod(rel, uint32(m))
}

// The group rule: in a shared space a caller acts with the space's group
// (FUSE sends no supplementary groups), elsewhere with its own; what root
// makes in a space is the space's group's, elsewhere the caller's group's
// unless a setgid directory gave it its own; what another caller makes is
// left as its identity made it.
func TestGroupRule(t *testing.T) {
	s := newStoreQuota(t, quota.NewFreeQuota(1<<30, 100, nil))
	const spaceGid = 2000
	space := "shared/team"
	ctx := space + "/agent/coder/session/t1/context"
	home := "home/1001/agent/coder/root"
	sgid := home + "/sgid"
	s.mkdirs(t, 0, spaceGid, 0o2775, space, ctx)
	s.mkdirs(t, 1001, 1001, 0o755, home)
	s.mkdirs(t, 1001, 3000, 0o2777, sgid)
	for rel, want := range map[string]uint32{ctx + "/x": spaceGid, home + "/x": 1001} {
		if got := s.tree.Cred(user, rel); got.Uid != 1001 || got.Gid != want {
			t.Errorf("Cred of uid 1001 on %s: %d:%d, want 1001:%d", rel, got.Uid, got.Gid, want)
		}
	}
	root5 := layout.Caller{Uid: 0, Gid: 5}
	made := map[string][2]uint32{ // rel → uid, gid it must have
		ctx + "/by-root":  {0, spaceGid},
		home + "/by-root": {0, 5},
		sgid + "/by-root": {0, 3000},
		ctx + "/by-user":  {1001, spaceGid},
	}
	testkit.Must(t, s.tree.Mkdir(root5, ctx+"/by-root", 0o755))
	testkit.Must(t, s.tree.Mkdir(root5, home+"/by-root", 0o755))
	testkit.Must(t, s.tree.Mkdir(root5, sgid+"/by-root", 0o755))
	testkit.Must(t, s.tree.Mkdir(user, ctx+"/by-user", 0o755))
	for rel, want := range made {
		st, err := s.tree.Lstat(rel)
		testkit.Must(t, err)
		if st.Uid != want[0] || st.Gid != want[1] {
			t.Errorf("%s is %d:%d, want %d:%d", rel, st.Uid, st.Gid, want[0], want[1])
		}
	}
	testkit.Must(t, os.Lchown(filepath.Join(s.store, home, "by-root"), 0, 0))
	testkit.Must(t, s.tree.GiveToCaller(user, home+"/by-root")) // another caller: nothing to give
	if st, err := s.tree.Lstat(home + "/by-root"); err != nil || st.Uid != 0 || st.Gid != 0 {
		t.Errorf("GiveToCaller of uid 1001 changed the owner: %+v %v", st, err)
	}
}

// A user's creates and writes are charged to the owner's quota before
// they are made: past the bound they are refused (EDQUOT) and nothing is
// made or written; what is removed is given back.
func TestChargesOwner(t *testing.T) {
	q := quota.NewFreeQuota(64<<10, 3, nil)
	s := newStoreQuota(t, q)
	home := "home/1001/agent/coder/root"
	s.mkdirs(t, 1001, 1001, 0o755, home) // one inode
	f, err := s.tree.Create(user, home+"/f", os.O_RDWR, 0o644)
	testkit.Must(t, err)
	defer f.OS().Close()
	testkit.Must(t, s.tree.Mkdir(user, home+"/d", 0o755))
	before := testkit.Snapshot(t, s.store, nil)
	testkit.WantErrno(t, "a fourth inode", s.tree.Mkdir(user, home+"/e", 0o755), syscall.EDQUOT)
	testkit.WantErrno(t, "a symlink past the bound", s.tree.Symlink(user, "f", home+"/l"), syscall.EDQUOT)
	big := make([]byte, 128<<10)
	wrote := false
	testkit.WantErrno(t, "a write past the bytes", f.Write(0, len(big), func() error {
		wrote = true
		_, err := f.OS().WriteAt(big, 0)
		return err
	}), syscall.EDQUOT)
	testkit.WantErrno(t, "an allocation past the bytes", f.Allocate(0, int64(len(big)), false, func() error {
		wrote = true
		return nil
	}), syscall.EDQUOT)
	if wrote {
		t.Error("a refused change ran")
	}
	testkit.Same(t, "the refused calls", before, testkit.Snapshot(t, s.store, nil))
	testkit.Must(t, s.tree.RemoveDir(user, home+"/d"))
	testkit.Must(t, s.tree.Mkdir(user, home+"/e", 0o755))
}

// Root's open(2) with O_CREAT of a name a user's file holds already (a
// FUSE CREATE that lost a race with the user's own, or the engine writing
// a file as root in a shared space) opens that file: it stays the user's,
// with its group, mode and bytes, and costs no inode. Only what the
// create made is given to the caller (GiveToCaller).
func TestCreateKeepsOwner(t *testing.T) {
	q := quota.NewFreeQuota(1<<30, 100, nil)
	s := newStoreQuota(t, q)
	free := "home/1001/agent/coder/root"
	s.mkdirs(t, 1001, 1001, 0o777, free)
	p := filepath.Join(s.store, free, "a")
	testkit.Must(t, os.WriteFile(p, []byte("the user's"), 0o640))
	testkit.Must(t, os.Chown(p, 1001, 1001))
	owner := func() string {
		st, err := os.Lstat(p)
		testkit.Must(t, err)
		sys := st.Sys().(*syscall.Stat_t)
		return fmt.Sprintf("%d:%d %v", sys.Uid, sys.Gid, st.Mode())
	}
	before, snap := owner(), testkit.Snapshot(t, s.store, nil)
	_, inodes := q.Use(1001)
	f, err := s.tree.Create(root0, free+"/a", os.O_RDONLY, 0o644)
	testkit.Must(t, err)
	f.OS().Close()
	if after := owner(); after != before {
		t.Errorf("root's create of uid 1001's file made it %s (was %s)", after, before)
	}
	testkit.Same(t, "root's create of an existing file", snap, testkit.Snapshot(t, s.store, nil))
	if _, n := q.Use(1001); n != inodes {
		t.Errorf("opening an existing file charged uid 1001 %d inodes more", n-inodes)
	}
	// A file the create makes is the caller's, as before.
	f, err = s.tree.Create(root0, free+"/b", os.O_RDWR, 0o644)
	testkit.Must(t, err)
	f.OS().Close()
	if st, err := os.Lstat(filepath.Join(s.store, free, "b")); err != nil || st.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("root's new file: %v, %v", st, err)
	}
}
