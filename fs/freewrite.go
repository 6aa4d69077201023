package fs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/session/freetree"
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
// truncate and allocation runs with the opener's identity (the store's
// filesystem keeps root's reserve from it) and inside the quota of the
// file's owner, as freetree.File does it: a write that would pass the
// quota is refused whole with EDQUOT, and what was written before stays.
type userFile struct {
	loopbackOps
	held
	file *freetree.File
}

func newUserFile(f *freetree.File) *userFile {
	return &userFile{loopbackOps: fs.NewLoopbackFileFromOS(f.OS()), file: f}
}

func (f *userFile) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	var n uint32
	err := f.file.Write(off, len(data), func() error {
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
	// The kernel's clearing of the setuid and setgid bits before a write
	// or truncate by a caller who may not chmod the file is the server's
	// (freetree.Tree.ClearSetID); before the size, whose truncate clears
	// them in the store too.
	if a := setattrOf(in); a.Mode != nil && a.OnlyMode() {
		done, err := f.file.ClearSetID(*a.Mode)
		if err != nil {
			return freeErrno(err)
		}
		if done {
			in.Valid &^= fuse.FATTR_MODE
		}
	}
	if size, ok := in.GetSize(); ok {
		if err := f.file.Resize(int64(size)); err != nil {
			return freeErrno(err)
		}
		in.Valid &^= fuse.FATTR_SIZE
	}
	return freeErrno(f.file.Setattr(chgrpGroups(ctx, in), func() error { return errOf(f.loopbackOps.Setattr(ctx, in, out)) }))
}

// Allocate reserves room, or punches a hole (fallocate), inside the
// owner's quota.
func (f *userFile) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	punch := mode&unix.FALLOC_FL_PUNCH_HOLE != 0
	return freeErrno(f.file.Allocate(int64(off), int64(size), punch, func() error { return errOf(f.loopbackOps.Allocate(ctx, off, size, mode)) }))
}

func (f *userFile) Release(ctx context.Context) syscall.Errno {
	bad := f.loopbackOps.Release(ctx)
	f.giveBack()
	return bad
}
