package fs

import (
	"context"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/freetree"
	"github.com/ctxfs/ctxfs/session/layout"
)

// freeNode is a node of a free tree (an agent's root/, a session's
// context/): any ordinary file operation works there, and users keep
// whatever they like, symlinks included. It is a loopback of the store,
// but unlike go-fuse's path-based loopback every access goes through the
// engine's door for the free trees (freetree.Tree, over
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
// A user's changes run with the user's own filesystem identity, so that
// what it makes is its own and the store's filesystem keeps root's
// reserved blocks from it; each create and write is inside the quota of
// bytes and inodes kept per uid (EDQUOT): the Tree decides both and
// charges the quota itself, which is why a user's files are served
// through the server (userFile, freewrite.go) and never with passthrough.
type freeNode struct {
	fs.Inode
	m *mountState
	// The store inode it stands for, by number, type and generation
	// (freeIDs).
	ino, gen uint64
	mode     uint32
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
	_ = (fs.NodeOpendirHandler)((*freeNode)(nil))
	_ = (fs.NodeStatfser)((*freeNode)(nil))
	_ = (fs.NodeFsyncer)((*freeNode)(nil))
	_ = (fs.NodeOnForgetter)((*freeNode)(nil))
)

// Fsync answers fsync of a directory: the store's directory is synced,
// so that the names made in it are durable (SQLite syncs a journal's
// directory before it deletes the journal, and fails its commit when that
// fails: Codex's state database). A file's own handle answers its fsync
// (go-fuse asks the node first).
func (n *freeNode) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	if fh, ok := f.(fs.FileFsyncer); ok {
		return fh.Fsync(ctx, flags)
	}
	if !n.IsDir() {
		return syscall.ENOTSUP
	}
	rel, bad := n.rel()
	if bad != 0 {
		return bad
	}
	return errno(n.store().SyncDir(rel))
}

// store is the store as the free trees are served from it: the engine's
// door, which checks every path is in a free tree, decides the identity
// each change runs with and charges its owner's quota.
func (n *freeNode) store() freetree.Tree { return n.m.e.FreeTree() }

// freeCaller is who the kernel says made the call: its uid and gid alone
// (no /proc read), nobody when it named none.
func freeCaller(ctx context.Context) layout.Caller {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return layout.Caller{Uid: session.Nobody, Gid: session.Nobody}
	}
	return layout.Caller{Uid: c.Uid, Gid: c.Gid}
}

// rel is the node's store path, from one walk up to the mount's root. A
// node that is no longer in the tree (its last name removed while open),
// or a path that is not inside a free tree, has none: ENOENT, never a
// guess. Nor has a node of a session's context/ once the session is gone
// from its path: the first directory of the ABI met on the way says what
// it is refused with (its session's life.ended: EPERM when it was
// archived, read only, ENOENT when deleted; an agent's root/ lies in no
// session). Its names would lead to the same file of a session made anew
// there: go-fuse keeps the parent of a child whose name a new node took,
// so a futimes or fchmod through a descriptor of the old file held across
// a delete changed the new session's.
func (n *freeNode) rel() (string, syscall.Errno) {
	var names []string
	checked := false
	for p, root := n.EmbeddedInode(), n.Root(); p != root; {
		name, parent := p.Parent()
		if parent == nil {
			return "", syscall.ENOENT
		}
		if d, ok := parent.Operations().(*dirNode); ok && !checked {
			checked = true
			if bad := d.ended(); bad != 0 {
				return "", bad
			}
		}
		names = append(names, name)
		p = parent
	}
	slices.Reverse(names)
	rel := n.m.top + "/" + strings.Join(names, "/")
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

// freeIno numbers a node of a free tree by its store inode (hard links are
// one node, freeIDs), clear of the ABI's numbers (inoOf sets the top bit).
func freeIno(ino uint64) uint64 { return ino &^ (1 << 63) }

// errno of the free trees: a symlink met where the kernel expected
// something else (a name swapped for a link since the kernel looked it
// up) is ELOOP, what the kernel says of a link it will not follow.
func freeErrno(err error) syscall.Errno {
	if freetree.LinkMet(err) {
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
	node, id := n.m.freeID(n.Root(), rel, st)
	return n.NewInode(ctx, node, id), 0
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
	c := freeCaller(ctx)
	// The kernel's clearing of the setuid and setgid bits before a write
	// or truncate (freetree.Tree.ClearSetID); before the size, whose
	// truncate clears them in the store too.
	if a.Mode != nil && a.OnlyMode() {
		done, err := n.store().ClearSetID(rel, *a.Mode)
		if err != nil {
			return freeErrno(err)
		}
		if done {
			a.Mode = nil
		}
	}
	if a.Size != nil {
		if err := n.store().Truncate(c, rel, int64(*a.Size)); err != nil {
			return freeErrno(err)
		}
	}
	if err := n.store().Setattr(c, rel, chgrpGroups(ctx, in), a); err != nil {
		return freeErrno(err)
	}
	return n.Getattr(ctx, nil, out)
}

// chgrpGroups are the caller's supplementary groups when in gives the
// file to a group, so that chgrp to any group the caller is in works as
// it would on a local filesystem (read from /proc: FUSE does not send
// them, and only a chgrp needs them).
func chgrpGroups(ctx context.Context, in *fuse.SetAttrIn) []uint32 {
	if _, ok := in.GetGID(); ok {
		return callerOf(ctx).Groups
	}
	return nil
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
		f, err := n.store().Open(freeCaller(ctx), rel, openFlags(flags))
		if err != nil {
			return nil, 0, freeErrno(err)
		}
		return handle(f), 0, 0
	})
}

// handle serves the open file f. A file whose writes nothing counts
// (root's own home, freetree.File.Uncounted) is served with passthrough
// (the kernel reads and writes the store's file itself; freeFile). Every
// other file is served through the server (userFile), whoever opens it:
// a user's writes must reach its quota, and the kernel refuses an open
// without passthrough of an inode another open holds with it (EIO), so
// root's opens of a user's or a space's file must go the same way as the
// user's.
func handle(f *freetree.File) fs.FileHandle {
	if f.Uncounted() {
		return newFreeFile(f.OS())
	}
	return newUserFile(f)
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
		f, err := n.store().Create(freeCaller(ctx), rel, openFlags(flags), os.FileMode(mode&0o777))
		if err != nil {
			return nil, 0, freeErrno(err)
		}
		var bad syscall.Errno
		if ch, bad = n.newChild(ctx, rel, out); bad != 0 {
			f.OS().Close()
			return nil, 0, bad
		}
		return handle(f), 0, 0
	})
	return ch, fh, fl, bad
}

// made finishes the creation of rel (err: the store's answer): its node
// is a child of n.
func (n *freeNode) made(ctx context.Context, rel string, err error, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if err != nil {
		return nil, freeErrno(err)
	}
	return n.newChild(ctx, rel, out)
}

// dirMode is the mode mkdir(2) asks for: its permissions and the sticky
// bit (a tmp/ others may write but not clear out), which mkdir keeps.
func dirMode(mode uint32) os.FileMode {
	perm := os.FileMode(mode & 0o777)
	if mode&unix.S_ISVTX != 0 {
		perm |= os.ModeSticky
	}
	return perm
}

func (n *freeNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	rel, bad := n.child(name)
	if bad != 0 {
		return nil, bad
	}
	return n.made(ctx, rel, n.store().Mkdir(freeCaller(ctx), rel, dirMode(mode)), out)
}

func (n *freeNode) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	rel, bad := n.child(name)
	if bad != 0 {
		return nil, bad
	}
	return n.made(ctx, rel, n.store().Mknod(freeCaller(ctx), rel, mode, int(rdev)), out)
}

func (n *freeNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	rel, bad := n.child(name)
	if bad != 0 {
		return nil, bad
	}
	return n.made(ctx, rel, n.store().Symlink(freeCaller(ctx), target, rel), out)
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
	return n.made(ctx, rel, n.store().Link(freeCaller(ctx), from, rel), out)
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
	return freeErrno(n.store().Remove(freeCaller(ctx), rel))
}

func (n *freeNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	rel, bad := n.child(name)
	if bad != 0 {
		return bad
	}
	return freeErrno(n.store().RemoveDir(freeCaller(ctx), rel))
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
	return freeErrno(n.store().Rename(freeCaller(ctx), from, to, uint(flags)))
}

// OpendirHandle opens a directory of the free trees: a handle of ours,
// not go-fuse's, so that it counts against the opener's quota of open
// files (openDir). The listing is read at the first read.
func (n *freeNode) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return n.m.openDir(ctx, n.listing, 0)
}

// listing is the directory's entries now, for a handle (openDir).
func (n *freeNode) listing(ctx context.Context) ([]fuse.DirEntry, syscall.Errno) {
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
	return list, 0
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
