package session

import (
	"errors"
	"os"
	"path"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/layout"
)

// FreeCred is the filesystem identity a caller acts with in a free tree
// (FreeTree.Cred): its uid, the group of the place, and for a chgrp its
// supplementary groups.
type FreeCred = storefs.Cred

// FreeTree is the free trees' door to the store (an agent's root/, a
// session's context/), for the FUSE projection: every call checks that
// its path is inside a free tree (ENOENT otherwise, never a guess), a
// change runs with the identity the caller acts with there (Cred: the
// group rule of shared spaces is here), and nothing follows a symlink
// (internal/storefs; a link met where a directory was is LinkMet).
type FreeTree struct{ root *storefs.Root }

// FreeTree is the store as the free trees are served from it.
func (e *Engine) FreeTree() FreeTree { return FreeTree{root: e.root} }

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
func (t FreeTree) Cred(c layout.Caller, rel string) FreeCred {
	cr := FreeCred{Uid: c.Uid, Gid: c.Gid}
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
func (t FreeTree) spaceGroup(rel string) (uint32, bool) {
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
func (t FreeTree) GiveToCaller(c layout.Caller, rel string) error {
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

func (t FreeTree) Lstat(rel string) (*unix.Stat_t, error) {
	if err := inFree(rel); err != nil {
		return nil, err
	}
	return t.root.Lstat(rel)
}

func (t FreeTree) Readlink(rel string) ([]byte, error) {
	if err := inFree(rel); err != nil {
		return nil, err
	}
	return t.root.Readlink(rel)
}

func (t FreeTree) ReadDir(rel string) ([]storefs.Entry, error) {
	if err := inFree(rel); err != nil {
		return nil, err
	}
	return t.root.ReadDir(rel)
}

// Statfs is the store's filesystem.
func (t FreeTree) Statfs() (*unix.Statfs_t, error) { return t.root.Statfs() }

// The changes run as cred (storefs.Root.As), so that what a caller makes
// is its own and the store's filesystem keeps root's reserve from it.

func (t FreeTree) OpenFile(cred FreeCred, rel string, flags int, perm os.FileMode) (*os.File, error) {
	if err := inFree(rel); err != nil {
		return nil, err
	}
	return t.root.As(cred).OpenFile(rel, flags, perm)
}

func (t FreeTree) Mkdir(cred FreeCred, rel string, perm os.FileMode) error {
	if err := inFree(rel); err != nil {
		return err
	}
	return t.root.As(cred).Mkdir(rel, perm)
}

// Mknod makes a node with exactly mode's permissions: the server's umask
// must not narrow them.
func (t FreeTree) Mknod(cred FreeCred, rel string, mode uint32, dev int) error {
	if err := inFree(rel); err != nil {
		return err
	}
	store := t.root.As(cred)
	if err := store.Mknod(rel, mode, dev); err != nil {
		return err
	}
	return store.Chmod(rel, mode&07777)
}

func (t FreeTree) Symlink(cred FreeCred, target, rel string) error {
	if err := inFree(rel); err != nil {
		return err
	}
	return t.root.As(cred).Symlink(target, rel)
}

func (t FreeTree) Link(cred FreeCred, from, rel string) error {
	if err := inFree(from, rel); err != nil {
		return err
	}
	return t.root.As(cred).Link(from, rel)
}

func (t FreeTree) Remove(cred FreeCred, rel string) error {
	if err := inFree(rel); err != nil {
		return err
	}
	return t.root.As(cred).Remove(rel)
}

func (t FreeTree) RemoveDir(cred FreeCred, rel string) error {
	if err := inFree(rel); err != nil {
		return err
	}
	return t.root.As(cred).RemoveDir(rel)
}

func (t FreeTree) Rename(cred FreeCred, from, to string, flags uint) error {
	if err := inFree(from, to); err != nil {
		return err
	}
	return t.root.As(cred).Rename(from, to, flags)
}

// Setattr changes rel's mode, owner and times as cred (its size: a
// truncate through OpenFile).
func (t FreeTree) Setattr(cred FreeCred, rel string, a SetAttr) error {
	if err := inFree(rel); err != nil {
		return err
	}
	return a.Apply(t.root.As(cred), rel)
}

// AsUser runs call, an operation on a descriptor of a free tree, with
// cred's filesystem identity (storefs.AsUser).
func (t FreeTree) AsUser(cred FreeCred, call func() error) error {
	return storefs.AsUser(cred, call)
}
