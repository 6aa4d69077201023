package fs

import (
	"context"
	"errors"
	"os"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/quota"
)

// freeNode is a node of a free tree (an agent's root/, a session's
// context/): any ordinary file operation works there, and users keep
// whatever they like, symlinks included. It is a loopback of the store,
// but unlike go-fuse's path-based loopback every access goes through the
// engine's door for the free trees (session.FreeTree, over
// internal/storefs): the path of the node is walked without
// following any symlink, and the last name is acted on with *at calls that
// do not follow it either. A symlink the user made is served as a link
// (the kernel follows it in the caller's own namespace, never the server);
// a directory swapped for a link while the kernel still caches the old
// name makes the operation fail (ELOOP) instead of reaching outside.
//
// Its path is its place in go-fuse's tree, which moves with every rename
// made through the mount (users cannot reach the store any other way).
//
// A user's changes run with the user's own filesystem identity (credOf), so
// that what it makes is its own and the store's filesystem keeps root's
// reserved blocks from it; each create and write is inside the quota of
// bytes and inodes the engine keeps per uid (quota.FreeQuota: EDQUOT),
// which is why a user's files are served through the server (userFile,
// freewrite.go) and never with passthrough.
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

// store is the store as the free trees are served from it: the engine's
// door, which checks every path is in a free tree.
func (n *freeNode) store() session.FreeTree { return n.m.e.FreeTree() }

// quota is the free trees' quota of bytes and inodes per uid.
func (n *freeNode) quota() *quota.FreeQuota { return n.m.e.Limits().Free }

// credOf is the filesystem identity the caller acts with on rel, as the
// engine says (session.FreeTree.Cred: the space's group in a shared
// space). It uses only the uid and gid the kernel sent: no /proc read.
func (n *freeNode) credOf(ctx context.Context, rel string) session.FreeCred {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return session.FreeCred{Uid: session.Nobody, Gid: session.Nobody}
	}
	return n.store().Cred(layout.Caller{Uid: c.Uid, Gid: c.Gid}, rel)
}

// charged makes something new at rel for the caller inside its quota:
// one inode and est bytes are taken first (EDQUOT when they do not fit),
// and given back when make fails; then the charge is what the new inode
// really holds.
func (n *freeNode) charged(ctx context.Context, rel string, est int64, make func() error) error {
	uid := callerUid(ctx)
	if err := n.quota().Take(uid, est, 1); err != nil {
		return err
	}
	if err := make(); err != nil {
		n.quota().Give(uid, est, 1)
		return err
	}
	if st, err := n.store().Lstat(rel); err == nil {
		n.quota().Give(uid, est-quota.FreeCharge(st), 0)
	}
	return nil
}

// removed gives back to its owner what the inode st described cost, once
// its last name is gone (a directory has one name and its "." link).
func (n *freeNode) removed(st *unix.Stat_t) {
	if st == nil {
		return
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR || st.Nlink <= 1 {
		n.quota().Give(st.Uid, quota.FreeCharge(st), 1)
	}
}

// rel is the node's store path. A node that is no longer in the tree (its
// last name removed while open), or a path that is not inside a free tree,
// has none: ENOENT, never a guess.
func (n *freeNode) rel() (string, syscall.Errno) {
	p := n.Path(n.Root())
	rel := n.m.top + "/" + p
	switch layout.Classify(rel).Kind {
	case layout.PlaceFree, layout.PlaceFreeRoot:
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
	if session.LinkMet(err) {
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

// giveToCaller makes what root just created its group's, as the engine
// says (session.FreeTree.GiveToCaller: a shared space's group in a
// space). Every other caller made it with its own identity (credOf),
// which did that already.
func (n *freeNode) giveToCaller(ctx context.Context, rel string) syscall.Errno {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return 0
	}
	return freeErrno(n.store().GiveToCaller(layout.Caller{Uid: c.Uid, Gid: c.Gid}, rel))
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
		if bad := n.truncate(ctx, rel, int64(*a.Size)); bad != 0 {
			return bad
		}
	}
	if err := n.store().Setattr(withGroups(ctx, in, n.credOf(ctx, rel)), rel, a); err != nil {
		return freeErrno(err)
	}
	return n.Getattr(ctx, nil, out)
}

// withGroups is cred with the caller's supplementary groups when in
// gives the file to a group: chgrp to any group the caller is in works
// as it would on a local filesystem (read from /proc: FUSE does not send
// them, and only a chgrp needs them).
func withGroups(ctx context.Context, in *fuse.SetAttrIn, cred session.FreeCred) session.FreeCred {
	if _, ok := in.GetGID(); ok && cred.Uid != 0 {
		cred.Groups = callerOf(ctx).Groups
	}
	return cred
}

// truncate sets the size of the regular file rel (truncate(2) of a path),
// as the caller and inside its owner's quota.
func (n *freeNode) truncate(ctx context.Context, rel string, size int64) syscall.Errno {
	cred := n.credOf(ctx, rel)
	f, err := n.store().OpenFile(cred, rel, os.O_WRONLY, 0)
	if err != nil {
		return freeErrno(err)
	}
	defer f.Close()
	return freeErrno(resize(f, actor{store: n.store(), cred: cred, quota: n.quota()}, size))
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
		cred := n.credOf(ctx, rel)
		f, err := n.store().OpenFile(cred, rel, openFlags(flags)&^(os.O_CREATE|os.O_EXCL), 0)
		if err != nil {
			return nil, 0, freeErrno(err)
		}
		return n.handle(f, rel, cred), 0, 0
	})
}

// handle serves the open file f at rel. Root's own home is root's alone
// (0700): its files are served with passthrough (the kernel reads and
// writes the store's file itself; freeFile). Every other file is served
// through the server (userFile), whoever opens it: a user's writes must
// reach its quota, and the kernel refuses an open without passthrough of
// an inode another open holds with it (EIO), so root's opens of a user's
// or a space's file must go the same way as the user's.
func (n *freeNode) handle(f *os.File, rel string, cred session.FreeCred) fs.FileHandle {
	if cred.Uid == 0 && layout.Classify(rel).Home == layout.PrivateHome(0) {
		return newFreeFile(f)
	}
	return newUserFile(f, actor{store: n.store(), cred: cred, quota: n.quota()})
}

// freeFile is go-fuse's loopback file (every operation on its descriptor),
// counted in its opener's quota of open files, with passthrough: root's
// opens in its own home (handle).
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
	fh, fl, bad := n.m.opened(ctx, func() (fs.FileHandle, uint32, syscall.Errno) {
		cred := n.credOf(ctx, rel)
		var f *os.File
		err := n.charged(ctx, rel, 0, func() (err error) {
			f, err = n.store().OpenFile(cred, rel, openFlags(flags)|os.O_CREATE|os.O_EXCL, os.FileMode(mode&0o777))
			return err
		})
		if errors.Is(err, os.ErrExist) && flags&syscall.O_EXCL == 0 {
			// Made by someone else since the kernel looked: open that,
			// as open(2) with O_CREAT does (it costs nothing new).
			f, err = n.store().OpenFile(cred, rel, openFlags(flags)&^os.O_CREATE, 0)
		}
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
		return n.handle(f, rel, cred), 0, 0
	})
	return ch, fh, fl, bad
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
	err := n.charged(ctx, rel, quota.FreeBlock, func() error {
		return n.store().Mkdir(n.credOf(ctx, rel), rel, os.FileMode(mode&0o777))
	})
	return n.made(ctx, rel, err, out)
}

func (n *freeNode) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	rel, bad := n.child(name)
	if bad != 0 {
		return nil, bad
	}
	err := n.charged(ctx, rel, 0, func() error {
		return n.store().Mknod(n.credOf(ctx, rel), rel, mode, int(rdev))
	})
	return n.made(ctx, rel, err, out)
}

func (n *freeNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	rel, bad := n.child(name)
	if bad != 0 {
		return nil, bad
	}
	err := n.charged(ctx, rel, quota.FreeBlock, func() error {
		return n.store().Symlink(n.credOf(ctx, rel), target, rel)
	})
	return n.made(ctx, rel, err, out)
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
	if err := n.store().Link(n.credOf(ctx, rel), from, rel); err != nil {
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
	st, _ := n.store().Lstat(rel)
	if err := n.store().Remove(n.credOf(ctx, rel), rel); err != nil {
		return freeErrno(err)
	}
	n.removed(st)
	return 0
}

func (n *freeNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	rel, bad := n.child(name)
	if bad != 0 {
		return bad
	}
	st, _ := n.store().Lstat(rel)
	if err := n.store().RemoveDir(n.credOf(ctx, rel), rel); err != nil {
		return freeErrno(err)
	}
	n.removed(st)
	return 0
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
	var replaced *unix.Stat_t
	if flags&unix.RENAME_EXCHANGE == 0 {
		replaced, _ = n.store().Lstat(to)
	}
	if err := n.store().Rename(n.credOf(ctx, to), from, to, uint(flags)); err != nil {
		return freeErrno(err)
	}
	n.removed(replaced)
	return 0
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
