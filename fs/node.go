package fs

import (
	"context"
	"hash/fnv"
	"path"
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

// storeNode is what every ABI node shares: its place in the tree. The rel
// of a node never changes: ABI entries are never renamed through the mount,
// and inode numbers are derived from rel (inoOf), so a path always maps to
// the same node and a node to one path. The free trees are freeNodes.
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

// inoOf gives every ABI path its own stable inode number. The top bit keeps
// it clear of the store's own numbers, which the free trees use.
func inoOf(rel string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(rel))
	return h.Sum64() | 1<<63
}

// errno maps an engine error to what the kernel gets (one table: abi.Errno).
func errno(err error) syscall.Errno { return abi.Errno(err) }

// statAttr fills out from the store file.
func (n *storeNode) statAttr(out *fuse.Attr) syscall.Errno {
	st, err := n.m.e.Stat(n.rel)
	if err != nil {
		return errno(err)
	}
	storeAttr(out, st, n.rel, n.place)
	return 0
}

// storeAttr describes a store file as the tree shows it: numbered by its
// path, and read-only kinds without their write bits, so that the kernel
// (default_permissions) refuses writers honestly.
func storeAttr(out *fuse.Attr, st *unix.Stat_t, rel string, pl session.Place) {
	fromStat(out, st)
	out.Ino = inoOf(rel)
	if pl.Kind == session.PlaceReadOnly || pl.Kind == session.PlaceArchived {
		out.Mode &^= 0222
	}
}

// virtualAttr describes a file the store does not hold (ctl, index/list,
// an index entry not written yet): owned like its directory, with the
// directory's permissions limited to perm (no execute bits).
func (n *storeNode) virtualAttr(out *fuse.Attr, perm uint32, size int) syscall.Errno {
	st, err := n.m.e.Stat(path.Dir(n.rel))
	if err != nil {
		return errno(err)
	}
	fromStat(out, st)
	out.Ino = inoOf(n.rel)
	out.Mode = syscall.S_IFREG | st.Mode&perm
	out.Size = uint64(size)
	out.Nlink = 1
	setBlocks(out)
	return 0
}

// fromStat fills a FUSE attribute from a stat of the store.
func fromStat(out *fuse.Attr, st *unix.Stat_t) {
	out.Ino = st.Ino
	out.Size = uint64(st.Size)
	out.Blocks = uint64(st.Blocks)
	out.Atime, out.Atimensec = uint64(st.Atim.Sec), uint32(st.Atim.Nsec)
	out.Mtime, out.Mtimensec = uint64(st.Mtim.Sec), uint32(st.Mtim.Nsec)
	out.Ctime, out.Ctimensec = uint64(st.Ctim.Sec), uint32(st.Ctim.Nsec)
	out.Mode = st.Mode
	out.Nlink = uint32(st.Nlink)
	out.Owner = fuse.Owner{Uid: st.Uid, Gid: st.Gid}
	out.Rdev = uint32(st.Rdev)
	out.Blksize = uint32(st.Blksize)
}

// fromStatfs fills a FUSE statfs answer from the store's filesystem.
func fromStatfs(out *fuse.StatfsOut, s *unix.Statfs_t) {
	out.Blocks, out.Bfree, out.Bavail = s.Blocks, s.Bfree, s.Bavail
	out.Files, out.Ffree = s.Files, s.Ffree
	out.Bsize, out.Frsize, out.NameLen = uint32(s.Bsize), uint32(s.Frsize), uint32(s.Namelen)
}

func setBlocks(out *fuse.Attr) {
	out.Blksize = 4096
	out.Blocks = (out.Size + 511) / 512
}

// setattrOf translates a SETATTR for the engine, which judges and applies
// it (fs decides no rule).
func setattrOf(in *fuse.SetAttrIn) session.SetAttr {
	var a session.SetAttr
	if sz, ok := in.GetSize(); ok {
		a.Size = &sz
	}
	if m, ok := in.GetMode(); ok {
		a.Mode = &m
	}
	if u, ok := in.GetUID(); ok {
		a.Uid = &u
	}
	if g, ok := in.GetGID(); ok {
		a.Gid = &g
	}
	at, aok := in.GetATime()
	mt, mok := in.GetMTime()
	if aok || mok {
		ts := [2]unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		if aok {
			ts[0] = unix.NsecToTimespec(at.UnixNano())
		}
		if mok {
			ts[1] = unix.NsecToTimespec(mt.UnixNano())
		}
		a.Times = &ts
	}
	return a
}

// setattr asks the engine to apply a SETATTR, then answers with the new
// attributes.
func (n *storeNode) setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut, getattr func(context.Context, fs.FileHandle, *fuse.AttrOut) syscall.Errno) syscall.Errno {
	if err := n.m.e.Setattr(callerOf(ctx), n.rel, setattrOf(in)); err != nil {
		return errno(err)
	}
	return getattr(ctx, nil, out)
}

// isRead reports whether open flags ask for reading.
func isRead(flags uint32) bool { return flags&syscall.O_ACCMODE != syscall.O_WRONLY }

// isWrite reports whether open flags ask for writing.
func isWrite(flags uint32) bool { return flags&syscall.O_ACCMODE != syscall.O_RDONLY }

// newNode builds the node of an existing place, as the engine describes it.
func (m *mountState) newNode(n session.Node, rel string) (fs.InodeEmbedder, uint32) {
	w := where{m: m, rel: rel, place: n.Place}
	switch {
	case n.Place.Kind == session.PlaceCtl:
		return &ctlNode{storeNode: storeNode{where: w}}, syscall.S_IFREG
	case n.Place.Kind == session.PlaceIndexList:
		return &listNode{storeNode: storeNode{where: w}}, syscall.S_IFREG
	case n.Virtual:
		return &indexValueNode{storeNode: storeNode{where: w}}, syscall.S_IFREG
	case n.Place.Kind == session.PlaceFreeRoot:
		return &freeNode{m: m}, syscall.S_IFDIR
	case n.Dir:
		return &dirNode{storeNode: storeNode{where: w}}, syscall.S_IFDIR
	case n.Place.Kind == session.PlaceLog:
		return &logNode{storeNode: storeNode{where: w}}, syscall.S_IFREG
	case n.Place.Kind == session.PlaceValue:
		return &valueNode{storeNode: storeNode{where: w}}, syscall.S_IFREG
	}
	return &roNode{storeNode: storeNode{where: w}}, syscall.S_IFREG // read-only and archived files
}

// attach makes node the child name of parent and fills out.
func attach(ctx context.Context, parent *fs.Inode, node fs.InodeEmbedder, typ uint32, n session.Node, rel string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if _, ok := node.(*freeNode); ok {
		// A free tree is numbered by the store's inodes (freeID).
		fromStat(&out.Attr, n.Stat)
		id := freeID(n.Stat)
		out.Attr.Ino = id.Ino
		out.SetAttrTimeout(dirAttrTimeout)
		return parent.NewInode(ctx, node, id), 0
	}
	if n.Virtual {
		var ao fuse.AttrOut
		if errno := node.(fs.NodeGetattrer).Getattr(ctx, nil, &ao); errno != 0 {
			return nil, errno
		}
		out.Attr = ao.Attr
	} else {
		storeAttr(&out.Attr, n.Stat, rel, n.Place) // the stat Lookup just made
	}
	out.SetAttrTimeout(fileAttrTimeout)
	if typ == syscall.S_IFDIR {
		out.SetAttrTimeout(dirAttrTimeout)
	}
	return parent.NewInode(ctx, node, fs.StableAttr{Mode: typ, Ino: inoOf(rel), Gen: 1}), 0
}
