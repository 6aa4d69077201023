package freetree

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/layout"
)

// The changes run as the caller's Cred (storefs.Root.As), so that what a
// caller makes is its own and the store's filesystem keeps root's reserve
// from it, and inside the quota of bytes and inodes of the owner of what
// they change (quota.FreeQuota): a new inode is charged to its maker
// before it is made (EDQUOT, and nothing is made), an inode's last name
// removed gives back what it cost.

// as is the store as c acts on rel (its Cred).
func (t Tree) as(c layout.Caller, rel string) *storefs.Root { return t.root.As(t.Cred(c, rel)) }

// charged makes something new at rel for uid inside its quota: one inode
// and est bytes are taken first (EDQUOT when they do not fit), and given
// back when make fails; then the charge is what the new inode really
// holds.
func (t Tree) charged(uid uint32, rel string, est int64, make func() error) error {
	if err := t.quota.Take(uid, est, 1); err != nil {
		return err
	}
	if err := make(); err != nil {
		t.quota.Give(uid, est, 1)
		return err
	}
	if st, err := t.root.Lstat(rel); err == nil {
		t.quota.Give(uid, est-t.charge(st), 0)
	}
	return nil
}

// made makes something new at rel for c (charged), then gives it to c's
// group (GiveToCaller).
func (t Tree) made(c layout.Caller, rel string, est int64, make func(store *storefs.Root) error) error {
	if err := inFree(rel); err != nil {
		return err
	}
	store := t.as(c, rel)
	if err := t.charged(c.Uid, rel, est, func() error { return make(store) }); err != nil {
		return err
	}
	return t.GiveToCaller(c, rel)
}

// removed gives back to its owner what the inode st described cost, once
// its last name is gone (a directory has one name and its "." link).
func (t Tree) removed(st *unix.Stat_t) {
	if st == nil {
		return
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR || st.Nlink <= 1 {
		t.quota.Give(st.Uid, t.charge(st), 1)
	}
}

// Open opens the file rel for c with flags (never creating it: Create
// does, charged).
func (t Tree) Open(c layout.Caller, rel string, flags int) (*File, error) {
	if err := inFree(rel); err != nil {
		return nil, err
	}
	cred := t.Cred(c, rel)
	f, err := t.root.As(cred).OpenFile(rel, flags&^(os.O_CREATE|os.O_EXCL), 0)
	if err != nil {
		return nil, err
	}
	return t.file(cred, rel, f), nil
}

// Create makes the regular file rel for c (one inode charged) and opens
// it with flags. Without O_EXCL a file someone else made since the kernel
// looked is opened instead, as open(2) with O_CREAT does (it costs
// nothing new, and it stays its owner's: only a file this call made is
// given to the caller).
func (t Tree) Create(c layout.Caller, rel string, flags int, perm os.FileMode) (*File, error) {
	if err := inFree(rel); err != nil {
		return nil, err
	}
	cred := t.Cred(c, rel)
	store := t.root.As(cred)
	var f *os.File
	err := t.charged(c.Uid, rel, 0, func() (err error) {
		f, err = store.OpenFile(rel, flags|os.O_CREATE|os.O_EXCL, perm)
		return err
	})
	if errors.Is(err, os.ErrExist) && flags&os.O_EXCL == 0 {
		if f, err = store.OpenFile(rel, flags&^os.O_CREATE, 0); err != nil {
			return nil, err
		}
		return t.file(cred, rel, f), nil
	}
	if err != nil {
		return nil, err
	}
	if err := t.GiveToCaller(c, rel); err != nil {
		f.Close()
		return nil, err
	}
	return t.file(cred, rel, f), nil
}

// Mkdir makes the directory rel for c (an inode and a block charged).
func (t Tree) Mkdir(c layout.Caller, rel string, perm os.FileMode) error {
	return t.made(c, rel, quota.FreeBlock, func(store *storefs.Root) error { return store.Mkdir(rel, perm) })
}

// Mknod makes a node with exactly mode's permissions for c (an inode
// charged): the server's umask must not narrow them.
func (t Tree) Mknod(c layout.Caller, rel string, mode uint32, dev int) error {
	return t.made(c, rel, 0, func(store *storefs.Root) error {
		if err := store.Mknod(rel, mode, dev); err != nil {
			return err
		}
		return store.Chmod(rel, mode&07777)
	})
}

// Symlink makes the link rel to target for c (an inode and a block
// charged).
func (t Tree) Symlink(c layout.Caller, target, rel string) error {
	return t.made(c, rel, quota.FreeBlock, func(store *storefs.Root) error { return store.Symlink(target, rel) })
}

// Link gives the inode at from the new name rel (no new inode: nothing
// charged).
func (t Tree) Link(c layout.Caller, from, rel string) error {
	if err := inFree(from, rel); err != nil {
		return err
	}
	return t.as(c, rel).Link(from, rel)
}

// Remove removes the name rel (not a directory); RemoveDir the empty
// directory rel. The owner gets back what the inode cost once its last
// name is gone.
func (t Tree) Remove(c layout.Caller, rel string) error {
	return t.removing(rel, func() error { return t.as(c, rel).Remove(rel) })
}

func (t Tree) RemoveDir(c layout.Caller, rel string) error {
	return t.removing(rel, func() error { return t.as(c, rel).RemoveDir(rel) })
}

// removing runs remove, which takes the name rel away, and gives back
// what the inode there cost.
func (t Tree) removing(rel string, remove func() error) error {
	if err := inFree(rel); err != nil {
		return err
	}
	st, _ := t.root.Lstat(rel)
	if err := remove(); err != nil {
		return err
	}
	t.removed(st)
	return nil
}

// Rename moves from to to as c (flags: renameat2's); what a rename
// replaces is given back to its owner.
func (t Tree) Rename(c layout.Caller, from, to string, flags uint) error {
	if err := inFree(from, to); err != nil {
		return err
	}
	var replaced *unix.Stat_t
	if flags&unix.RENAME_EXCHANGE == 0 {
		replaced, _ = t.root.Lstat(to)
	}
	if err := t.as(c, to).Rename(from, to, flags); err != nil {
		return err
	}
	t.removed(replaced)
	return nil
}

// Attrs is a change of mode, owner and times (session.SetAttr).
type Attrs interface {
	Apply(root *storefs.Root, rel string) error
}

// Setattr changes rel's mode, owner and times as c, with groups (a
// chgrp: the caller's supplementary groups, which FUSE does not send);
// its size: Truncate.
func (t Tree) Setattr(c layout.Caller, rel string, groups []uint32, a Attrs) error {
	if err := inFree(rel); err != nil {
		return err
	}
	return a.Apply(t.root.As(withGroups(t.Cred(c, rel), groups)), rel)
}

// withGroups is cred with the caller's supplementary groups, so that a
// chgrp to any group the caller is in works as it would on a local
// filesystem (root needs none).
func withGroups(cred Cred, groups []uint32) Cred {
	if cred.Uid != 0 {
		cred.Groups = groups
	}
	return cred
}

// Truncate sets the size of the regular file rel (truncate(2) of a path)
// as c, inside its owner's quota.
func (t Tree) Truncate(c layout.Caller, rel string, size int64) error {
	f, err := t.Open(c, rel, os.O_WRONLY)
	if err != nil {
		return err
	}
	defer f.OS().Close()
	return f.Resize(size)
}

// ClearSetID clears the setuid and setgid bits of the file rel as the
// server, when mode is its mode with some of them cleared and nothing
// else changed, and reports whether it was that. A write or truncate by
// a caller who may write a file but does not own it (a member of a
// shared space, another's group-writable file) has the kernel clear them
// first, with a SETATTR of the mode (the mount does not take the
// clearing on itself); made as the caller, that chmod was refused
// (EPERM) and the write with it. A caller's own chmod of a file it does
// not own never reaches the server (default_permissions: the kernel
// refuses it), so such a SETATTR is the kernel's.
func (t Tree) ClearSetID(rel string, mode uint32) (bool, error) {
	if err := inFree(rel); err != nil {
		return false, err
	}
	return t.root.ClearSetIDAt(rel, mode)
}
