package fs

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"path"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/layout"
)

// What the kernel may keep (issue 10; the figures behind each choice are
// in docs/benchmarks.md#kernel-caches):
//
//   - cacheTimeout: the names and attributes of the ABI's files and of the
//     directories that hold sessions, index entries and session files are
//     kept for an hour (they were a GETATTR per stat and names lived a
//     second: the slowest of the mount's reads and listings).
//     Exact sizes do not rest on the timeout but on invalidation: every
//     change the engine (or a handler) makes reaches Mounts.changed before
//     it is acknowledged, which marks the kernel's attributes of the file
//     stale at once (notify.go). Nothing else changes these files: the
//     store is the server's alone. The hour only bounds what a missed
//     invalidation would cost; integration/fuse_cache_test.go fails when
//     one is missed.
//   - dirAttrTimeout: the mount roots (another process may add a shared
//     space to the store: ctxfs space add --store), the other structural
//     directories, the archive's directories and the free trees (a jailed
//     run writes root/ through a bind of the store, behind the kernel's
//     back) keep their attributes for a second, as before.
//   - A timeout of 0 is replaced by go-fuse with the mount's global one
//     (none is set for attributes; names get a second): "always ask" is
//     alwaysAsk, one nanosecond.
const (
	cacheTimeout   = time.Hour
	dirAttrTimeout = time.Second
	alwaysAsk      = time.Nanosecond
)

// pageSize is the kernel's page, the unit in which it caches a log's
// pages (pages.go).
const pageSize = 4096

// storeNode is what every ABI node shares: its place in the tree. The rel
// of a node never changes: ABI entries are never renamed through the mount,
// and inode numbers are derived from rel (inoOf), so a path always maps to
// the same node and a node to one path. The free trees are freeNodes.
type storeNode struct {
	fs.Inode
	where
	// id is shared by every node object of this inode number (identity.go).
	// Its stamp is when the engine last announced a change of this file
	// while the kernel knew it (Unix ns, strictly increasing: nextStamp).
	// The mtime and ctime the node reports are never older: the kernel
	// drops a file's cached pages only when a fresh GETATTR shows another
	// size or mtime, and a value replaced by one of the same size within
	// one tick of the store's clock would otherwise keep its old pages.
	id *identity
	// life is the life of the session the node lies in (nil outside
	// sessions): its generation, and where the node's file is once the
	// session is gone from its path (life.go).
	life *life
}

// newStoreNode is the shared part of the node of w, with the identity of
// its inode number in its session's life.
func newStoreNode(w where) storeNode {
	l := w.m.ms.lives.of(w.place)
	return storeNode{where: w, life: l, id: w.m.ms.ids.of(inoOf(w.rel), l.generation())}
}

// stable is the node's identity for go-fuse: its number, and the
// generation of its session's life.
func (n *storeNode) stable(typ uint32) fs.StableAttr {
	return fs.StableAttr{Mode: typ, Ino: n.id.ino, Gen: n.life.generation()}
}

// now is the store path of the node's file now (life.now).
func (n *storeNode) now() (string, syscall.Errno) { return n.life.now(n.rel) }

// ended is what a change through the node is refused with once its
// session is gone from its path, 0 before (life.ended).
func (n *storeNode) ended() syscall.Errno { return n.life.ended() }

// openEnded opens the file of a node whose session is gone from its path
// (ok is false while it lives there): the file where the session went,
// as the node of that place opens it (an archived file: read only), or
// ENOENT. A descriptor reopened through /proc/PID/fd so never reaches a
// session made anew at the old path.
func (n *storeNode) openEnded(ctx context.Context, flags uint32) (fh fs.FileHandle, fl uint32, bad syscall.Errno, ok bool) {
	if n.ended() == 0 {
		return nil, 0, 0, false
	}
	rel, bad := n.now()
	if bad != 0 {
		return nil, 0, bad, true
	}
	node, err := n.m.e.Lookup(callerUid(ctx), rel)
	if err != nil {
		return nil, 0, errno(err), true
	}
	there, _ := n.m.newNode(node, rel)
	opener, isFile := there.(fs.NodeOpener)
	if !isFile {
		return nil, 0, syscall.ENOENT, true
	}
	fh, fl, bad = opener.Open(ctx, flags)
	return fh, fl, bad, true
}

// openCounted opens the node's file: where its session went once the
// session is gone from its path (openEnded), else by open, whose handle
// counts against the opener's quota of open files (opened).
func (n *storeNode) openCounted(ctx context.Context, flags uint32, open func(context.Context, uint32) (fs.FileHandle, uint32, syscall.Errno)) (fs.FileHandle, uint32, syscall.Errno) {
	if fh, fl, bad, ok := n.openEnded(ctx, flags); ok {
		return fh, fl, bad
	}
	return n.m.opened(ctx, func() (fs.FileHandle, uint32, syscall.Errno) { return open(ctx, flags) })
}

// changeStamp is the node's stamp (stamped).
func (n *storeNode) changeStamp() *atomic.Int64 { return &n.id.stamp }

// given is whether the kernel may hold attributes of this inode given
// since they were last marked stale (meaningful for tracked nodes).
func (n *storeNode) given() *atomic.Bool { return &n.id.attrsGiven }

// gave records that attributes are about to be given to the kernel.
func (n *storeNode) gave() { n.id.attrsGiven.Store(true) }

// stamped nodes carry a change stamp (notify.go): a file when it changes;
// a directory when it is announced itself (names came or went in it) and
// an index directory when one of its entries is (its listing is the
// index's memory). A change of a file inside a directory leaves the
// directory's mtime the store's, which moves only when names come or go:
// a moved mtime resets the kernel's cached listing, 10,000 sessions'
// worth for a session container, at every send otherwise.
type stamped interface{ changeStamp() *atomic.Int64 }

// lastStamp is the last stamp given out.
var lastStamp atomic.Int64

// nextStamp is now in Unix ns, later than every stamp given out before.
func nextStamp() int64 {
	for {
		old := lastStamp.Load()
		next := max(time.Now().UnixNano(), old+1)
		if lastStamp.CompareAndSwap(old, next) {
			return next
		}
	}
}

// stampAttr moves out's mtime and ctime up to the node's stamp.
func (n *storeNode) stampAttr(out *fuse.Attr) {
	st := n.id.stamp.Load()
	if st == 0 {
		return
	}
	if st > int64(out.Mtime)*1e9+int64(out.Mtimensec) {
		out.Mtime, out.Mtimensec = uint64(st/1e9), uint32(st%1e9)
	}
	if st > int64(out.Ctime)*1e9+int64(out.Ctimensec) {
		out.Ctime, out.Ctimensec = uint64(st/1e9), uint32(st%1e9)
	}
}

// attrTimeout is how long the kernel keeps the attributes of a node (see
// cacheTimeout): a directory's for long only where the engine promises to
// announce every change of its names (session.Promises.CacheListing).
func attrTimeout(dir bool, p session.Promises) time.Duration {
	if dir && !p.CacheListing {
		return dirAttrTimeout
	}
	return cacheTimeout
}

// where is a node's place: its mount, its path and what Classify said.
type where struct {
	m     *mountState
	rel   string
	place layout.Place
}

// inoOf gives every ABI path its own inode number, the same for the
// server's life. The top bit keeps it clear of the store's own numbers,
// which the free trees use.
//
// It is a keyed hash (SHA-256 of a secret made at random for each server,
// then the path), because go-fuse takes a LOOKUP's answer whose number it
// knows already for the node it knows (its StableAttr table): with a hash
// anyone could compute (FNV of the path, before), a user could search out
// a name of their own whose number is another user's private log (a meet
// in the middle, 2^32 tries each way) and, once that log's node was held,
// be served it through their own name, permission checked against their
// own file's attributes. Without the key the numbers cannot be computed,
// and the user sees only their own. Its cost (about 0.2 µs) is a
// LOOKUP's or a listed name's, beside a round trip of tens of µs.
func inoOf(rel string) uint64 {
	h := sha256.New()
	h.Write(inoKey[:])
	io.WriteString(h, rel)
	var sum [sha256.Size]byte
	return binary.LittleEndian.Uint64(h.Sum(sum[:0])) | 1<<63
}

// inoKey is inoOf's secret.
var inoKey = func() (k [32]byte) {
	rand.Read(k[:]) // never fails (crypto/rand)
	return k
}()

// errno maps an engine error to what the kernel gets (one table: abi.Errno).
func errno(err error) syscall.Errno { return abi.Errno(err) }

// statAttr fills out from the store file: where it is now (now), so a
// file of a session archived while it was held shows the archived file,
// read only.
func (n *storeNode) statAttr(out *fuse.Attr) syscall.Errno {
	rel, bad := n.now()
	if bad != 0 {
		return bad
	}
	st, err := n.m.e.Stat(rel)
	if err != nil {
		return errno(err)
	}
	pl := n.place
	if rel != n.rel {
		pl = layout.Classify(rel)
	}
	storeAttr(out, st, n.id.ino, rel, pl)
	n.stampAttr(out)
	return 0
}

// fileAttr is statAttr for a GETATTR that may come with a handle (f).
// A node whose session was deleted has no store path left, but a handle
// reading its store file (a log's reader, an archived file's) still
// describes the file it reads, read only: the kernel asks for the size
// before it reads through its page cache, so the reader reads on.
func (n *storeNode) fileAttr(f fs.FileHandle, out *fuse.Attr) syscall.Errno {
	h, ok := f.(interface{ reader() *storeReader })
	if n.ended() != syscall.ENOENT || !ok || h.reader() == nil {
		return n.statAttr(out)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(h.reader().f.Fd()), &st); err != nil {
		return errno(err)
	}
	fromStat(out, &st)
	out.Ino = n.id.ino
	out.Mode &^= 0222
	n.stampAttr(out)
	return 0
}

// storeAttr describes a store file as the tree shows it: numbered by its
// path, and read-only kinds without their write bits, so that the kernel
// (default_permissions) refuses writers honestly.
func storeAttr(out *fuse.Attr, st *unix.Stat_t, ino uint64, rel string, pl layout.Place) {
	fromStat(out, st)
	out.Ino = ino
	if layout.ShownReadOnly(rel, pl) {
		out.Mode &^= 0222
	}
}

// virtualAttr describes a file the store does not hold (ctl, index/list,
// an index entry not written yet): owned like its directory, with the
// directory's permissions limited to perm (no execute bits).
func (n *storeNode) virtualAttr(out *fuse.Attr, perm uint32, size int) syscall.Errno {
	if n.ended() != 0 {
		return syscall.ENOENT // an archived session has no ctl
	}
	st, err := n.m.e.Stat(path.Dir(n.rel))
	if err != nil {
		return errno(err)
	}
	fromStat(out, st)
	out.Ino = n.id.ino
	out.Mode = syscall.S_IFREG | st.Mode&perm
	out.Size = uint64(size)
	out.Nlink = 1
	setBlocks(out)
	n.stampAttr(out)
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
		a.Now = (!aok || in.Valid&fuse.FATTR_ATIME_NOW != 0) && (!mok || in.Valid&fuse.FATTR_MTIME_NOW != 0)
	}
	return a
}

// setattr asks the engine to apply a SETATTR, then answers with the new
// attributes. It is made where the file is now (now): a futimes of a file
// held across its session's archive is one of the archived file (EPERM),
// never of a session made anew at its old path.
func (n *storeNode) setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut, getattr func(context.Context, fs.FileHandle, *fuse.AttrOut) syscall.Errno) syscall.Errno {
	rel, bad := n.now()
	if bad != 0 {
		return bad
	}
	if err := n.m.e.Setattr(callerOf(ctx), rel, setattrOf(in)); err != nil {
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
	case n.Place.Kind == layout.PlaceCtl:
		return &ctlNode{storeNode: newStoreNode(w)}, syscall.S_IFREG
	case n.Place.Kind == layout.PlaceIndexList:
		return &listNode{storeNode: newStoreNode(w)}, syscall.S_IFREG
	case n.Virtual:
		return &indexValueNode{storeNode: newStoreNode(w)}, syscall.S_IFREG
	case n.Place.Kind == layout.PlaceFreeRoot:
		return &freeNode{m: m}, syscall.S_IFDIR
	case n.Dir:
		return &dirNode{storeNode: newStoreNode(w), promises: n.Promises}, syscall.S_IFDIR
	case n.Place.Kind == layout.PlaceLog:
		return &logNode{storeNode: newStoreNode(w)}, syscall.S_IFREG
	case n.Place.Kind == layout.PlaceValue:
		return &valueNode{storeNode: newStoreNode(w)}, syscall.S_IFREG
	}
	return &roNode{storeNode: newStoreNode(w)}, syscall.S_IFREG // read-only and archived files
}

// attach makes the node of n the child rel of parent and fills out. gen
// is Mounts.gen read before n was looked up: when any change was announced
// since, the change may have found no node to invalidate (this one was not
// in the tree yet) while the reply carries what was there before it, so
// the kernel is told to ask again rather than keep the reply.
func (m *mountState) attach(ctx context.Context, parent *fs.Inode, n session.Node, rel string, out *fuse.EntryOut, gen uint64) (*fs.Inode, syscall.Errno) {
	node, typ := m.newNode(n, rel)
	if _, ok := node.(*freeNode); ok {
		// A free tree is numbered by the store's inodes (freeID).
		fromStat(&out.Attr, n.Stat)
		node, id := m.freeID(parent.Root(), rel, n.Stat)
		out.Attr.Ino = id.Ino
		out.SetAttrTimeout(dirAttrTimeout) // and the mount's 1 s for the name
		return parent.NewInode(ctx, node, id), 0
	}
	ino := inoOf(rel)
	if !n.Virtual {
		storeAttr(&out.Attr, n.Stat, ino, rel, n.Place) // the stat Lookup just made
	}
	// An inode the kernel knows already keeps its node: go-fuse drops
	// this one after the reply. What the reply gives the kernel is
	// recorded in the identity both share (identity.go), so the kept
	// node, which changes find, knows it.
	child := parent.NewInode(ctx, node, node.(interface{ stable(uint32) fs.StableAttr }).stable(typ))
	if t, ok := child.Operations().(attrsTracker); ok {
		// Before the check of gen below, which a change that the stat
		// may have missed moves before it looks at this flag (notify.go).
		t.given().Store(true)
	}
	if n.Virtual {
		var ao fuse.AttrOut
		if errno := child.Operations().(fs.NodeGetattrer).Getattr(ctx, nil, &ao); errno != 0 {
			return nil, errno
		}
		out.Attr = ao.Attr // with its stamp
	} else if sn, ok := child.Operations().(interface{ stampAttr(*fuse.Attr) }); ok {
		sn.stampAttr(&out.Attr)
	}
	if ln, ok := child.Operations().(*logNode); ok {
		ln.telling(int64(out.Attr.Size))
	}
	timeout := attrTimeout(typ == syscall.S_IFDIR, n.Promises)
	entry := cacheTimeout
	if m.ms.gen.Load() != gen {
		timeout, entry = alwaysAsk, alwaysAsk
	}
	out.SetAttrTimeout(timeout)
	out.SetEntryTimeout(entry)
	return child, 0
}
