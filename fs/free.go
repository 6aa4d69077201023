package fs

import (
	"context"
	"errors"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session"
)

// freeNode is a node of a free tree (an agent's root/, a session's
// context/): any ordinary file operation works there, and users keep
// whatever they like, symlinks included. It is a loopback of the store,
// but unlike go-fuse's path-based loopback every access goes through the
// store's door (storefs): the path of the node is walked without
// following any symlink, and the last name is acted on with *at calls that
// do not follow it either. A symlink the user made is served as a link
// (the kernel follows it in the caller's own namespace, never the server);
// a directory swapped for a link while the kernel still caches the old
// name makes the operation fail (ELOOP) instead of reaching outside.
//
// Its path is its place in go-fuse's tree, which moves with every rename
// made through the mount (users cannot reach the store any other way).
type freeNode struct {
	fs.Inode
	m *mountState
}

var (
	_ = (fs.NodeLookuper)((*freeNode)(nil))
	_ = (fs.NodeGetattrer)((*freeNode)(nil))
	_ = (fs.NodeSetattrer)((*freeNode)(nil))
	_ = (fs.NodeOpener)((*freeNode)(nil))
	_ = (fs.NodeCreater)((*freeNode)(nil))
	_ = (fs.NodeMkdirer)((*freeNode)(nil))
	_ = (fs.NodeMknoder)((*freeNode)(nil))
	_ = (fs.NodeSymlinker)((*freeNode)(nil))
	_ = (fs.NodeLinker)((*freeNode)(nil))
	_ = (fs.NodeReadlinker)((*freeNode)(nil))
	_ = (fs.NodeUnlinker)((*freeNode)(nil))
	_ = (fs.NodeRmdirer)((*freeNode)(nil))
	_ = (fs.NodeRenamer)((*freeNode)(nil))
	_ = (fs.NodeReaddirer)((*freeNode)(nil))
	_ = (fs.NodeStatfser)((*freeNode)(nil))
)

// store is the store as the free trees are served from it.
func (n *freeNode) store() *storefs.Root { return n.m.e.FreeTrees() }

// rel is the node's store path. A node that is no longer in the tree (its
// last name removed while open), or a path that is not inside a free tree,
// has none: ENOENT, never a guess.
func (n *freeNode) rel() (string, syscall.Errno) {
	p := n.Path(n.Root())
	rel := n.m.top + "/" + p
	switch session.Classify(rel).Kind {
	case session.PlaceFree, session.PlaceFreeRoot:
		return rel, 0
	}
	return "", syscall.ENOENT
}

// child is the store path of name in this directory.
func (n *freeNode) child(name string) (string, syscall.Errno) {
	rel, bad := n.rel()
	return rel + "/" + name, bad
}

// freeID numbers a node of a free tree by its store inode (hard links are
// one node), clear of the ABI's numbers (inoOf sets the top bit).
func freeID(st *unix.Stat_t) fs.StableAttr {
	return fs.StableAttr{Mode: st.Mode & unix.S_IFMT, Ino: freeIno(st.Ino), Gen: 1}
}

func freeIno(ino uint64) uint64 { return ino &^ (1 << 63) }

// errno of the free trees: a symlink met where the kernel expected
// something else (a name swapped for a link since the kernel looked it
// up) is ELOOP, what the kernel says of a link it will not follow.
func freeErrno(err error) syscall.Errno {
	var ue *storefs.UnsafeError
	if errors.As(err, &ue) && ue.Link {
		return syscall.ELOOP
	}
	return errno(err)
}

// newChild makes the node of rel, which the store holds now, child name.
func (n *freeNode) newChild(ctx context.Context, rel string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	st, err := n.store().Lstat(rel)
	if err != nil {
		return nil, freeErrno(err)
	}
	fromStat(&out.Attr, st)
	out.Attr.Ino = freeIno(st.Ino)
	out.SetAttrTimeout(dirAttrTimeout)
	return n.NewInode(ctx, &freeNode{m: n.m}, freeID(st)), 0
}

// giveToCaller makes what was just created belong to the caller, as if it
// had made it itself (the server runs as root): the caller's uid; in a
// shared space the space's group (everything of a space is its group's,
// SPEC 2), else the group a setgid directory passed on, else the caller's.
func (n *freeNode) giveToCaller(ctx context.Context, rel string) syscall.Errno {
	c, ok := fuse.FromContext(ctx)
	if !ok || os.Geteuid() != 0 {
		return 0
	}
	gid := int(c.Gid)
	if pl := session.Classify(rel); strings.HasPrefix(pl.Home, "shared/") {
		if sp, err := n.store().Lstat(pl.Home); err == nil {
			gid = int(sp.Gid)
		}
	} else if dir, err := n.store().Lstat(path.Dir(rel)); err == nil && dir.Mode&unix.S_ISGID != 0 {
		gid = -1
	}
	if err := n.store().Chown(rel, int(c.Uid), gid); err != nil {
		n.store().RemoveAll(rel)
		return freeErrno(err)
	}
	return 0
}

func (n *freeNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	rel, bad := n.child(name)
	if bad != 0 {
		return nil, bad
	}
	return n.newChild(ctx, rel, out)
}

func (n *freeNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.SetTimeout(dirAttrTimeout)
	if fg, ok := f.(fs.FileGetattrer); ok {
		return fg.Getattr(ctx, out)
	}
	rel, bad := n.rel()
	if bad != 0 {
		return bad
	}
	st, err := n.store().Lstat(rel)
	if err != nil {
		return freeErrno(err)
	}
	fromStat(&out.Attr, st)
	out.Attr.Ino = freeIno(st.Ino)
	return 0
}

// Setattr changes mode, owner, size and times: through the open file when
// there is one (its descriptor is the file), else by the node's path.
func (n *freeNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if fsa, ok := f.(fs.FileSetattrer); ok {
		if bad := fsa.Setattr(ctx, in, out); bad != 0 {
			return bad
		}
		return n.Getattr(ctx, f, out)
	}
	rel, bad := n.rel()
	if bad != 0 {
		return bad
	}
	a := setattrOf(in)
	if a.Size != nil {
		if bad := n.truncate(rel, int64(*a.Size)); bad != 0 {
			return bad
		}
	}
	if err := a.Apply(n.store(), rel); err != nil {
		return freeErrno(err)
	}
	return n.Getattr(ctx, nil, out)
}

// truncate sets the size of the regular file rel (truncate(2) of a path).
func (n *freeNode) truncate(rel string, size int64) syscall.Errno {
	f, err := n.store().OpenFile(rel, os.O_WRONLY, 0)
	if err != nil {
		return freeErrno(err)
	}
	defer f.Close()
	return freeErrno(f.Truncate(size))
}

// openFlags are what a FUSE open asks of the store file: the kernel keeps
// O_APPEND offsets itself and FMODE_EXEC is not an open flag.
func openFlags(flags uint32) int {
	return int(flags &^ (syscall.O_APPEND | fuse.FMODE_EXEC))
}

func (n *freeNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	rel, bad := n.rel()
	if bad != 0 {
		return nil, 0, bad
	}
	return n.m.opened(ctx, func() (fs.FileHandle, uint32, syscall.Errno) {
		f, err := n.store().OpenFile(rel, openFlags(flags)&^(os.O_CREATE|os.O_EXCL), 0)
		if err != nil {
			return nil, 0, freeErrno(err)
		}
		return newFreeFile(f), 0, 0
	})
}

// freeFile is go-fuse's loopback file (every operation on its descriptor),
// counted in its opener's quota of open files.
type freeFile struct {
	*fs.LoopbackFile
	held
}

func newFreeFile(f *os.File) *freeFile { return &freeFile{LoopbackFile: fs.NewLoopbackFileFromOS(f)} }

// Ioctl is refused (ENOTTY): go-fuse's loopback would run the caller's
// ioctl as root on the store's file, with root's privileges (set the
// immutable flag, swap an ext4 boot inode, …), which no user may have.
func (f *freeFile) Ioctl(ctx context.Context, cmd uint32, arg uint64, input []byte, output []byte) (int32, syscall.Errno) {
	return 0, syscall.ENOTTY
}

func (f *freeFile) Release(ctx context.Context) syscall.Errno {
	bad := f.LoopbackFile.Release(ctx)
	f.giveBack()
	return bad
}

func (n *freeNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	rel, bad := n.child(name)
	if bad != 0 {
		return nil, nil, 0, bad
	}
	var ch *fs.Inode
	fh, _, bad := n.m.opened(ctx, func() (fs.FileHandle, uint32, syscall.Errno) {
		f, err := n.store().OpenFile(rel, openFlags(flags)|os.O_CREATE, os.FileMode(mode&0o777))
		if err != nil {
			return nil, 0, freeErrno(err)
		}
		var bad syscall.Errno
		if bad = n.giveToCaller(ctx, rel); bad == 0 {
			ch, bad = n.newChild(ctx, rel, out)
		}
		if bad != 0 {
			f.Close()
			return nil, 0, bad
		}
		return newFreeFile(f), 0, 0
	})
	return ch, fh, 0, bad
}

// made finishes the creation of rel: its owner is the caller, its node a
// child of n.
func (n *freeNode) made(ctx context.Context, rel string, err error, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if err != nil {
		return nil, freeErrno(err)
	}
	if bad := n.giveToCaller(ctx, rel); bad != 0 {
		return nil, bad
	}
	return n.newChild(ctx, rel, out)
}

func (n *freeNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	rel, bad := n.child(name)
	if bad != 0 {
		return nil, bad
	}
	return n.made(ctx, rel, n.store().Mkdir(rel, os.FileMode(mode&0o777)), out)
}

func (n *freeNode) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	rel, bad := n.child(name)
	if bad != 0 {
		return nil, bad
	}
	err := n.store().Mknod(rel, mode, int(rdev))
	if err == nil {
		err = n.store().Chmod(rel, mode&07777) // the server's umask must not narrow it
	}
	return n.made(ctx, rel, err, out)
}

func (n *freeNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	rel, bad := n.child(name)
	if bad != 0 {
		return nil, bad
	}
	return n.made(ctx, rel, n.store().Symlink(target, rel), out)
}

// Link makes a hard link to another node of the free trees of this mount
// (a link into or out of the ABI's files is EXDEV).
func (n *freeNode) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	t, ok := target.(*freeNode)
	if !ok || t.m != n.m {
		return nil, syscall.EXDEV
	}
	from, bad := t.rel()
	if bad != 0 {
		return nil, bad
	}
	rel, bad := n.child(name)
	if bad != 0 {
		return nil, bad
	}
	if err := n.store().Link(from, rel); err != nil {
		return nil, freeErrno(err)
	}
	return n.newChild(ctx, rel, out)
}

func (n *freeNode) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	rel, bad := n.rel()
	if bad != 0 {
		return nil, bad
	}
	b, err := n.store().Readlink(rel)
	return b, freeErrno(err)
}

func (n *freeNode) Unlink(ctx context.Context, name string) syscall.Errno {
	rel, bad := n.child(name)
	if bad != 0 {
		return bad
	}
	return freeErrno(n.store().Remove(rel))
}

func (n *freeNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	rel, bad := n.child(name)
	if bad != 0 {
		return bad
	}
	return freeErrno(n.store().RemoveDir(rel))
}

// Rename moves a name within the free trees of this mount; RENAME_NOREPLACE
// and RENAME_EXCHANGE are honoured, anything else is EINVAL, and a move
// into or out of the ABI's directories is EXDEV.
func (n *freeNode) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if flags&^(unix.RENAME_NOREPLACE|unix.RENAME_EXCHANGE) != 0 {
		return syscall.EINVAL
	}
	p, ok := newParent.(*freeNode)
	if !ok || p.m != n.m {
		return syscall.EXDEV
	}
	from, bad := n.child(name)
	if bad != 0 {
		return bad
	}
	to, bad := p.child(newName)
	if bad != 0 {
		return bad
	}
	return freeErrno(n.store().Rename(from, to, uint(flags)))
}

func (n *freeNode) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	rel, bad := n.rel()
	if bad != 0 {
		return nil, bad
	}
	ents, err := n.store().ReadDir(rel)
	if err != nil {
		return nil, freeErrno(err)
	}
	list := make([]fuse.DirEntry, len(ents))
	for i, e := range ents {
		list[i] = fuse.DirEntry{Name: e.Name, Ino: freeIno(e.Ino), Mode: direntMode(e.Type)}
	}
	return fs.NewListDirStream(list), 0
}

// direntMode is the file type bits of a getdents type.
func direntMode(t uint8) uint32 {
	return uint32(t) << 12 // DT_* is S_IF* >> 12
}

func (n *freeNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	s, err := n.store().Statfs()
	if err != nil {
		return freeErrno(err)
	}
	fromStatfs(out, s)
	return 0
}
