package freetree

import (
	"errors"
	"os"
	"path"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/layout"
)

// Cred is the filesystem identity a caller acts with in a free tree
// (Tree.Cred): its uid, the group of the place, and for a chgrp its
// supplementary groups.
type Cred = storefs.Cred

// Tree is the free trees' door to the store: every call checks that its
// path is inside a free tree, a change runs with the identity the caller
// acts with there (Cred) inside its owner's quota, and nothing follows a
// symlink (internal/storefs; a link met where a directory was is
// LinkMet).
type Tree struct {
	root  *storefs.Root
	quota *quota.FreeQuota
}

// New is the free trees of the store root, whose users' bytes and inodes
// are bounded by q.
func New(root *storefs.Root, q *quota.FreeQuota) Tree { return Tree{root: root, quota: q} }

// charge is what the inode st describes costs (quota.FreeCharge): on a
// filesystem whose open files' st_blocks lag (storefs.Ways.BlocksNow:
// MooseFS counts none until the close), a regular file costs at least its
// size in whole blocks, so that a write cannot pass the quota unseen.
func (t Tree) charge(st *unix.Stat_t) int64 {
	c := quota.FreeCharge(st)
	if st.Mode&unix.S_IFMT == unix.S_IFREG && !t.root.Ways().BlocksNow {
		c = max(c, quota.BlocksFor(0, st.Size))
	}
	return c
}

// inFree refuses a path that is not inside a free tree.
func inFree(rels ...string) error {
	for _, rel := range rels {
		switch layout.Classify(rel).Kind {
		case layout.PlaceFree, layout.PlaceFreeRoot:
		default:
			return abi.Errorf(syscall.ENOENT, "", "%s is not in a free tree", rel)
		}
	}
	return nil
}

// LinkMet reports whether err is a symlink met where the store's door
// expected something else (a name swapped for a link since the kernel
// looked it up): ELOOP to the caller, what the kernel says of a link it
// will not follow.
func LinkMet(err error) bool {
	var ue *storefs.UnsafeError
	return errors.As(err, &ue) && ue.Link
}

// Cred is the identity c acts with on rel: its own uid, and the space's
// group in a shared space (everything of a space is its group's, SPEC 2,
// and the caller reaches it through that group: FUSE sends no
// supplementary groups), else its own gid (a setgid directory passes its
// group on by itself).
func (t Tree) Cred(c layout.Caller, rel string) Cred {
	cr := Cred{Uid: c.Uid, Gid: c.Gid}
	if gid, ok := t.spaceGroup(rel); ok {
		cr.Gid = gid
	}
	return cr
}

// spaceOf is the shared space rel is in ("shared/NAME"), or "".
func spaceOf(rel string) string {
	if home := layout.Classify(rel).Home; strings.HasPrefix(home, "shared/") {
		return home
	}
	return ""
}

// spaceGroup is the group of the shared space rel is in, if it is in one
// and its group can be read.
func (t Tree) spaceGroup(rel string) (uint32, bool) {
	if space := spaceOf(rel); space != "" {
		if sp, err := t.root.Lstat(space); err == nil {
			return sp.Gid, true
		}
	}
	return 0, false
}

// GiveToCaller makes what root (c) just created at rel in a shared space
// the space's group's, and anything else root made the caller's group's
// unless a setgid directory gave it its own. Every other caller made it
// with its own identity (Cred), which did that already. What cannot be
// given is removed.
func (t Tree) GiveToCaller(c layout.Caller, rel string) error {
	if err := inFree(rel); err != nil || os.Geteuid() != 0 || c.Uid != 0 {
		return err
	}
	gid := int(c.Gid)
	if spaceOf(rel) != "" {
		if sg, ok := t.spaceGroup(rel); ok {
			gid = int(sg)
		}
	} else if dir, err := t.root.Lstat(path.Dir(rel)); err == nil && dir.Mode&unix.S_ISGID != 0 {
		gid = -1
	}
	if err := t.root.Chown(rel, int(c.Uid), gid); err != nil {
		t.root.RemoveAll(rel)
		return err
	}
	return nil
}

// Lstat, Readlink and ReadDir look with the server's identity: the kernel
// has checked the caller's permissions (default_permissions).

func (t Tree) Lstat(rel string) (*unix.Stat_t, error) {
	if err := inFree(rel); err != nil {
		return nil, err
	}
	return t.root.Lstat(rel)
}

func (t Tree) Readlink(rel string) ([]byte, error) {
	if err := inFree(rel); err != nil {
		return nil, err
	}
	return t.root.Readlink(rel)
}

func (t Tree) ReadDir(rel string) ([]storefs.Entry, error) {
	if err := inFree(rel); err != nil {
		return nil, err
	}
	return t.root.ReadDir(rel)
}

// Statfs is the store's filesystem.
func (t Tree) Statfs() (*unix.Statfs_t, error) { return t.root.Statfs() }

// SyncDir syncs the directory rel (fsync of a directory of a free tree).
func (t Tree) SyncDir(rel string) error {
	if err := inFree(rel); err != nil {
		return err
	}
	return t.root.SyncDir(rel)
}
