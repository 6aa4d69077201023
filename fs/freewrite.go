package fs

import (
	"context"
	"os"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/quota"
)

// loopbackOps are the operations of go-fuse's loopback file that a
// user's handle keeps. PassthroughFd is left out on purpose: with it the
// kernel would write the store's file itself and the server would see no
// write to bound.
type loopbackOps interface {
	fs.FileReader
	fs.FileWriter
	fs.FileFlusher
	fs.FileFsyncer
	fs.FileGetattrer
	fs.FileSetattrer
	fs.FileAllocater
	fs.FileLseeker
	fs.FileGetlker
	fs.FileSetlker
	fs.FileSetlkwer
	fs.FileReleaser
}

// userFile is a file of a free tree outside root's home, opened by its
// user (or by root, or by a member of its space). It is served without
// passthrough, so every write(2) reaches the server (the
// mount has no writeback cache: a write is sent as it is made, and its
// error is write's). Reads too: the kernel refuses an open without
// passthrough of an inode that another open holds with it (EIO), so a
// user's reads and writes of one file must be served alike. Each write,
// truncate and allocation runs with the opener's identity
// (session.FreeTree.AsUser: the store's filesystem keeps root's reserve from it)
// and inside the quota of the file's owner: a write that would pass it is
// refused whole with EDQUOT, and what was written before stays.
type userFile struct {
	loopbackOps
	held
	actor
	f *os.File
}

func newUserFile(f *os.File, a actor) *userFile {
	return &userFile{loopbackOps: fs.NewLoopbackFileFromOS(f), f: f, actor: a}
}

// actor is who changes a file of a free tree: the engine's door to the
// store, the identity the change runs with, and the quota the file's
// owner pays from.
type actor struct {
	store session.FreeTree
	cred  session.FreeCred
	quota *quota.FreeQuota
}

// sizing serialises the changes of size of one store inode (by number,
// in stripes): what a change costs is read before and after it, and two
// writers extending one file at once would otherwise both be charged for
// the same blocks.
var sizing [64]sync.Mutex

func sizingOf(ino uint64) *sync.Mutex { return &sizing[ino%uint64(len(sizing))] }

// grow runs change, which may give f up to est bytes of blocks more (a
// write, an allocation; a truncate, none), after charging its owner est
// (EDQUOT when that does not fit); the charge is then set right by the
// blocks f really has after it (a failed, short or overwriting change
// gives back what it did not use; a shrinking one gives back more).
func grow(f *os.File, a actor, est int64, change func() error) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	mu := sizingOf(st.Ino)
	mu.Lock()
	defer mu.Unlock()
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	q := a.quota
	before := quota.FreeCharge(&st)
	if a.cred.Uid == 0 {
		q.Give(st.Uid, -est, 0) // root is never refused; the owner pays
	} else if err := q.Take(st.Uid, est, 0); err != nil {
		return err
	}
	err := a.store.AsUser(a.cred, change)
	if unix.Fstat(int(f.Fd()), &st) == nil {
		q.Give(st.Uid, est-(quota.FreeCharge(&st)-before), 0)
	}
	return err
}

// resize truncates or extends f to size as a, inside its owner's quota.
func resize(f *os.File, a actor, size int64) error {
	return grow(f, a, 0, func() error { return f.Truncate(size) }) // a new end is a hole
}

func (f *userFile) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	var n uint32
	err := grow(f.f, f.actor, quota.BlocksFor(off, int64(len(data))), func() error {
		var bad syscall.Errno
		n, bad = f.loopbackOps.Write(ctx, data, off)
		return errOf(bad)
	})
	return n, freeErrno(err)
}

// errOf is an errno as an error (nil for 0).
func errOf(bad syscall.Errno) error {
	if bad != 0 {
		return bad
	}
	return nil
}

// Setattr changes the open file as its opener; a new size is charged to
// (or given back to) the file's owner.
func (f *userFile) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if size, ok := in.GetSize(); ok {
		if err := resize(f.f, f.actor, int64(size)); err != nil {
			return freeErrno(err)
		}
		in.Valid &^= fuse.FATTR_SIZE
	}
	cred := withGroups(ctx, in, f.cred)
	return freeErrno(f.store.AsUser(cred, func() error { return errOf(f.loopbackOps.Setattr(ctx, in, out)) }))
}

// Allocate reserves room, or punches a hole (fallocate), inside the
// owner's quota.
func (f *userFile) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	est := quota.BlocksFor(int64(off), int64(size))
	if mode&unix.FALLOC_FL_PUNCH_HOLE != 0 {
		est = 0
	}
	return freeErrno(grow(f.f, f.actor, est, func() error { return errOf(f.loopbackOps.Allocate(ctx, off, size, mode)) }))
}

func (f *userFile) Release(ctx context.Context) syscall.Errno {
	bad := f.loopbackOps.Release(ctx)
	f.giveBack()
	return bad
}
