package fs

import (
	"context"
	"hash/fnv"
	"os"
	"path"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/session"
)

// fileAttrTimeout: files of the ABI change behind the kernel's back (the
// engine appends, replaces values), and stat sizes must be exact, so their
// attributes are never cached. The mounts' global attribute timeout is
// unset (0): go-fuse replaces a node's 0 by the global value, and the
// smallest non-zero value is still one jiffy in the kernel (a stat within
// a few milliseconds of another one then misses an append in between).
// Directories and the free trees set dirAttrTimeout themselves.
const fileAttrTimeout = 0

// dirAttrTimeout is how long the kernel may keep the attributes of
// directories and of everything in the free trees (owner and mode, which
// default_permissions checks on every path walk).
const dirAttrTimeout = time.Second

// storeNode is what every ABI node shares: its place in the tree and the
// store path behind it. The rel of a node never changes: ABI entries are
// never renamed through the mount, and inode numbers are derived from rel
// (inoOf), so a path always maps to the same node and a node to one path.
// (The roots of the free trees are loopback nodes, numbered as go-fuse's
// loopback numbers store files: loopbackID.)
type storeNode struct {
	fs.Inode
	where
}

// where is a node's place: its mount, its path and what Classify said.
type where struct {
	m     *mountState
	rel   string
	place session.Place
}

func (n *storeNode) path() string { return filepath.Join(n.m.store, n.rel) }

// dirPath is the store path of the directory holding the node.
func (n *storeNode) dirPath() string { return filepath.Join(n.m.store, path.Dir(n.rel)) }

// inoOf gives every ABI path its own stable inode number. The top bit keeps
// it clear of the store's own numbers, which the loopback free trees use.
func inoOf(rel string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(rel))
	return h.Sum64() | 1<<63
}

// errno maps an engine error to what the kernel gets (one table: abi.Errno).
func errno(err error) syscall.Errno { return abi.Errno(err) }

// statAttr fills out from the store file. Read-only kinds lose their write
// bits so that the kernel (default_permissions) refuses writers honestly.
func (n *storeNode) statAttr(out *fuse.Attr, readOnly bool) syscall.Errno {
	var st syscall.Stat_t
	if err := syscall.Lstat(n.path(), &st); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStat(&st)
	out.Ino = inoOf(n.rel)
	if readOnly {
		out.Mode &^= 0222
	}
	return 0
}

// virtualAttr describes a file the store does not hold (ctl, index/list,
// an index entry not written yet): owned like its directory, with the
// directory's permissions limited to perm (no execute bits).
func (n *storeNode) virtualAttr(out *fuse.Attr, perm uint32, size int) syscall.Errno {
	var st syscall.Stat_t
	if err := syscall.Lstat(n.dirPath(), &st); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStat(&st)
	out.Ino = inoOf(n.rel)
	out.Mode = syscall.S_IFREG | uint32(st.Mode)&perm
	out.Size = uint64(size)
	out.Nlink = 1
	setBlocks(out)
	return 0
}

func setBlocks(out *fuse.Attr) {
	out.Blksize = 4096
	out.Blocks = (out.Size + 511) / 512
}

// setattr applies owner, mode and time changes to the store file (the
// kernel has already checked that the caller may make them). Size changes
// are each kind's decision and must be handled before.
func (n *storeNode) setattr(in *fuse.SetAttrIn) syscall.Errno {
	p := n.path()
	if m, ok := in.GetMode(); ok {
		if err := syscall.Chmod(p, m&07777); err != nil {
			return fs.ToErrno(err)
		}
	}
	uid, uok := in.GetUID()
	gid, gok := in.GetGID()
	if uok || gok {
		u, g := -1, -1
		if uok {
			u = int(uid)
		}
		if gok {
			g = int(gid)
		}
		if err := syscall.Lchown(p, u, g); err != nil {
			return fs.ToErrno(err)
		}
	}
	return setTimes(p, in)
}

func setTimes(p string, in *fuse.SetAttrIn) syscall.Errno {
	at, aok := in.GetATime()
	mt, mok := in.GetMTime()
	if !aok && !mok {
		return 0
	}
	ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
	if aok {
		ts[0] = unix.NsecToTimespec(at.UnixNano())
	}
	if mok {
		ts[1] = unix.NsecToTimespec(mt.UnixNano())
	}
	return fs.ToErrno(unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW))
}

// onlyTimes reports whether a SETATTR changes nothing but times and size
// (touch on a file whose owner and mode are not the caller's to change);
// each kind judges a size change itself, before.
func onlyTimes(in *fuse.SetAttrIn) bool {
	return in.Valid&^(fuse.FATTR_SIZE|fuse.FATTR_ATIME|fuse.FATTR_MTIME|fuse.FATTR_ATIME_NOW|fuse.FATTR_MTIME_NOW|fuse.FATTR_CTIME|fuse.FATTR_FH|fuse.FATTR_LOCKOWNER) == 0
}

// isWrite reports whether open flags ask for writing.
func isWrite(flags uint32) bool { return flags&syscall.O_ACCMODE != syscall.O_RDONLY }

// isRead reports whether open flags ask for reading.
func isRead(flags uint32) bool { return flags&syscall.O_ACCMODE != syscall.O_WRONLY }

// newNode builds the node for an existing place; ENOENT when the store does
// not hold it (or holds something of the wrong type there).
func (m *mountState) newNode(rel string, pl session.Place) (fs.InodeEmbedder, uint32, syscall.Errno) {
	w := where{m: m, rel: rel, place: pl}
	switch pl.Kind {
	case session.PlaceCtl:
		return &ctlNode{storeNode: storeNode{where: w}}, syscall.S_IFREG, 0
	case session.PlaceIndexList:
		return &listNode{storeNode: storeNode{where: w}}, syscall.S_IFREG, 0
	case session.PlaceIndexCurrent, session.PlaceIndexEntry:
		n := &indexValueNode{storeNode: storeNode{where: w}}
		if _, err := n.value(); err != nil {
			return nil, 0, errno(err)
		}
		return n, syscall.S_IFREG, 0
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(m.storePath(rel), &st); err != nil {
		return nil, 0, fs.ToErrno(err)
	}
	typ := st.Mode & syscall.S_IFMT
	switch {
	case pl.Kind == session.PlaceFreeRoot && typ == syscall.S_IFDIR:
		return &freeNode{fs.LoopbackNode{RootData: m.loop}}, typ, 0
	case (pl.IsDir() || pl.Kind == session.PlaceArchived) && typ == syscall.S_IFDIR:
		return &dirNode{storeNode: storeNode{where: w}}, typ, 0
	case typ != syscall.S_IFREG:
		return nil, 0, syscall.ENOENT
	case pl.Kind == session.PlaceLog:
		return &logNode{storeNode: storeNode{where: w}}, typ, 0
	case pl.Kind == session.PlaceValue:
		return &valueNode{storeNode: storeNode{where: w}}, typ, 0
	case pl.Kind == session.PlaceReadOnly, pl.Kind == session.PlaceArchived:
		return &roNode{storeNode: storeNode{where: w}}, typ, 0
	}
	return nil, 0, syscall.ENOENT
}

// attach makes node the child name of parent and fills out.
func attach(ctx context.Context, parent *fs.Inode, node fs.InodeEmbedder, typ uint32, rel string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if lb, ok := node.(*freeNode); ok {
		// A loopback node finds its store path through the tree, so it
		// cannot stat itself before it is attached.
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(lb.RootData.Path, rel[len(topOf(rel)):]), &st); err != nil {
			return nil, fs.ToErrno(err)
		}
		out.Attr.FromStat(&st)
		// Its inode number must be the one go-fuse's loopback derives from
		// the store: renameat2 (mv) in a free tree checks it, and a
		// mismatch is EBUSY.
		sa := loopbackID(lb.RootData, &st)
		out.Attr.Ino = sa.Ino
		out.SetAttrTimeout(dirAttrTimeout)
		return parent.NewInode(ctx, node, sa), 0
	} else {
		var ao fuse.AttrOut
		if errno := node.(fs.NodeGetattrer).Getattr(ctx, nil, &ao); errno != 0 {
			return nil, errno
		}
		out.Attr = ao.Attr
		out.SetAttrTimeout(fileAttrTimeout)
		if typ == syscall.S_IFDIR {
			out.SetAttrTimeout(dirAttrTimeout)
		}
	}
	return parent.NewInode(ctx, node, fs.StableAttr{Mode: typ, Ino: inoOf(rel), Gen: 1}), 0
}

// freeNode is a node of a free tree (an agent's root/, a session's
// context/): go-fuse's loopback, with attributes cached for
// dirAttrTimeout (the mounts' global attribute timeout is 0).
type freeNode struct {
	fs.LoopbackNode
}

// newFreeNode is the LoopbackRoot.NewNode of the free trees.
func newFreeNode(r *fs.LoopbackRoot, parent *fs.Inode, name string, st *syscall.Stat_t) fs.InodeEmbedder {
	return &freeNode{fs.LoopbackNode{RootData: r}}
}

func (n *freeNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	errno := n.LoopbackNode.Getattr(ctx, f, out)
	out.SetTimeout(dirAttrTimeout)
	return errno
}

func (n *freeNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	errno := n.LoopbackNode.Setattr(ctx, f, in, out)
	out.SetTimeout(dirAttrTimeout)
	return errno
}

func (n *freeNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ch, errno := n.LoopbackNode.Lookup(ctx, name, out)
	out.SetAttrTimeout(dirAttrTimeout)
	return ch, errno
}

// loopbackID is how go-fuse's loopback numbers the inode of a store file
// (LoopbackRoot.idFromStat, which is not exported): the store's inode
// number, with the device mixed in when it is not the store's own.
func loopbackID(r *fs.LoopbackRoot, st *syscall.Stat_t) fs.StableAttr {
	swapped := uint64(st.Dev)<<32 | uint64(st.Dev)>>32
	swappedRootDev := r.Dev<<32 | r.Dev>>32
	return fs.StableAttr{Mode: st.Mode & syscall.S_IFMT, Ino: swapped ^ swappedRootDev ^ st.Ino, Gen: 1}
}

// topOf is "home" or "shared", the mount a rel lies in.
func topOf(rel string) string {
	for i := 0; i < len(rel); i++ {
		if rel[i] == '/' {
			return rel[:i]
		}
	}
	return rel
}

// exists reports whether the store holds p.
func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
