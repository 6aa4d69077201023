package freetree

import (
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/layout"
)

// File is a file of a free tree opened by a caller (Tree.Open, Create):
// each change of its size runs with the opener's identity and inside
// the quota of the file's owner (Write, Allocate, Resize).
type File struct {
	t         Tree
	cred      Cred
	f         *os.File
	uncounted bool
}

// file is f, opened at rel with cred.
func (t Tree) file(cred Cred, rel string, f *os.File) *File {
	return &File{t: t, cred: cred, f: f, uncounted: cred.Uid == 0 && layout.Classify(rel).Home == layout.PrivateHome(0)}
}

// OS is the store's open file.
func (f *File) OS() *os.File { return f.f }

// Uncounted reports whether nothing written to the file is counted: root's
// own home is root's alone (0700) and root is never bounded, so its
// opens there may be served by the kernel itself (passthrough). Every
// other open, root's of a user's or a space's file included, must have
// its writes reach the quota through Write, Allocate and Resize.
func (f *File) Uncounted() bool { return f.uncounted }

// sizing serialises the changes of size of one store inode (by number,
// in stripes): what a change costs is read before and after it, and two
// writers extending one file at once would otherwise both be charged for
// the same blocks.
var sizing [64]sync.Mutex

func sizingOf(ino uint64) *sync.Mutex { return &sizing[ino%uint64(len(sizing))] }

// grow runs change, which may give the file up to est bytes of blocks
// more (a write, an allocation; a truncate, none), as the opener, after
// charging its owner est (EDQUOT when that does not fit); the charge is
// then set right by the blocks the file really has after it (a failed,
// short or overwriting change gives back what it did not use; a
// shrinking one gives back more).
func (f *File) grow(est int64, change func() error) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.f.Fd()), &st); err != nil {
		return err
	}
	mu := sizingOf(st.Ino)
	mu.Lock()
	defer mu.Unlock()
	if err := unix.Fstat(int(f.f.Fd()), &st); err != nil {
		return err
	}
	q := f.t.quota
	before := f.t.charge(&st)
	if f.cred.Uid == 0 {
		q.Give(st.Uid, -est, 0) // root is never refused; the owner pays
	} else if err := q.Take(st.Uid, est, 0); err != nil {
		return err
	}
	err := storefs.AsUser(f.cred, change)
	if unix.Fstat(int(f.f.Fd()), &st) == nil {
		q.Give(st.Uid, est-(f.t.charge(&st)-before), 0)
	}
	return err
}

// Write runs write, which writes n bytes at off to the file, inside its
// owner's quota: a write that would pass it is refused whole (EDQUOT)
// before anything of it is written.
func (f *File) Write(off int64, n int, write func() error) error {
	return f.grow(quota.BlocksFor(off, int64(n)), write)
}

// Allocate runs allocate, a fallocate of size bytes at off (or a hole
// punched, which costs nothing), inside the owner's quota.
func (f *File) Allocate(off, size int64, punch bool, allocate func() error) error {
	est := quota.BlocksFor(off, size)
	if punch {
		est = 0
	}
	return f.grow(est, allocate)
}

// Resize truncates or extends the file to size as its opener, inside its
// owner's quota (a new end is a hole: nothing charged before).
func (f *File) Resize(size int64) error {
	return f.grow(0, func() error { return f.f.Truncate(size) })
}

// Setattr runs set, a change of the open file's mode, owner or times, as
// its opener with groups (a chgrp: the caller's supplementary groups).
func (f *File) Setattr(groups []uint32, set func() error) error {
	return storefs.AsUser(withGroups(f.cred, groups), set)
}

// ClearSetID is Tree.ClearSetID of the open file.
func (f *File) ClearSetID(mode uint32) (bool, error) {
	return storefs.ClearSetID(int(f.f.Fd()), mode)
}
