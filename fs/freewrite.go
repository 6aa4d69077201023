package fs

import (
	"context"
	"os"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session"
)

// loopbackOps are the operations of go-fuse's loopback file that a
// user's write handle keeps. PassthroughFd is left out on purpose: with
// it the kernel would write the store's file itself and the server would
// see no write to bound.
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

// freeWriteFile is a file of a free tree that a user (not root) opened
// for writing. It is served with FOPEN_DIRECT_IO and without passthrough,
// so every write(2) reaches the server (the kernel lets such an open sit
// beside passthrough reads of the same inode, which a cached open would
// not); each write, truncate and allocation runs with the opener's
// identity (storefs.AsUser: the store's filesystem keeps root's reserve
// from it) and inside the quota of the file's owner: a write that would
// pass it is refused whole with EDQUOT, and what was written before stays.
type freeWriteFile struct {
	loopbackOps
	held
	f     *os.File
	cred  storefs.Cred
	quota *session.FreeQuota
}

func newFreeWriteFile(f *os.File, cred storefs.Cred, quota *session.FreeQuota) *freeWriteFile {
	return &freeWriteFile{loopbackOps: fs.NewLoopbackFileFromOS(f), f: f, cred: cred, quota: quota}
}

// sizing serialises the changes of size of one store inode (by number,
// in stripes): what a change costs is read before and after it, and two
// writers extending one file at once would otherwise both be charged for
// the same blocks.
var sizing [64]sync.Mutex

func sizingOf(ino uint64) *sync.Mutex { return &sizing[ino%uint64(len(sizing))] }

// grow runs change, which makes f at least size bytes long (a write or an
// allocation ending there), after charging the owner what that costs; the
// charge is then set right by what the file's size became (a failed or
// short change gives back what it did not use).
func grow(f *os.File, q *session.FreeQuota, cred storefs.Cred, size int64, change func() error) error {
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
	before := session.RoundBlock(st.Size)
	cost := session.RoundBlock(max(size, st.Size)) - before
	if err := q.Take(st.Uid, cost, 0); err != nil {
		return err
	}
	err := storefs.AsUser(cred, change)
	if unix.Fstat(int(f.Fd()), &st) == nil {
		q.Give(st.Uid, cost-(session.RoundBlock(st.Size)-before), 0)
	}
	return err
}

// resize truncates or extends f to size as cred, inside its owner's
// quota.
func resize(f *os.File, q *session.FreeQuota, cred storefs.Cred, size int64) error {
	return grow(f, q, cred, size, func() error { return f.Truncate(size) })
}

func (f *freeWriteFile) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	var n uint32
	var bad syscall.Errno
	err := grow(f.f, f.quota, f.cred, off+int64(len(data)), func() error {
		n, bad = f.loopbackOps.Write(ctx, data, off)
		if bad != 0 {
			return bad
		}
		return nil
	})
	if err != nil {
		return n, freeErrno(err)
	}
	return n, 0
}

// Setattr changes the open file as its opener; a new size is charged to
// (or given back to) the file's owner.
func (f *freeWriteFile) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if size, ok := in.GetSize(); ok {
		if err := resize(f.f, f.quota, f.cred, int64(size)); err != nil {
			return freeErrno(err)
		}
		in.Valid &^= fuse.FATTR_SIZE
	}
	var bad syscall.Errno
	storefs.AsUser(f.cred, func() error {
		bad = f.loopbackOps.Setattr(ctx, in, out)
		return nil
	})
	return bad
}

// Allocate reserves room (fallocate). Only a plain allocation, which
// makes the file at least off+size long, is served: the other modes
// either keep the size while holding blocks (which the quota, counting
// sizes, would not see) or are of no use to a quota's owner.
func (f *freeWriteFile) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	if mode != 0 {
		return syscall.EOPNOTSUPP
	}
	var bad syscall.Errno
	err := grow(f.f, f.quota, f.cred, int64(off+size), func() error {
		if bad = f.loopbackOps.Allocate(ctx, off, size, mode); bad != 0 {
			return bad
		}
		return nil
	})
	return freeErrno(err)
}

func (f *freeWriteFile) Release(ctx context.Context) syscall.Errno {
	bad := f.loopbackOps.Release(ctx)
	f.giveBack()
	return bad
}
