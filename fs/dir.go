package fs

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/layout"
)

// dirNode is a directory of the ABI (everything but the free trees): it
// lists what the engine says the tree holds there, and every change of a
// name (mkdir, create, unlink, rmdir, rename, links) is the engine's to
// allow or refuse.
type dirNode struct {
	storeNode
	tracked // notify.go
	// promises are what the engine promised of this directory's listing
	// when it described it (session.Node): fs reads them, never decides.
	promises session.Promises
	// movedTo is where an archive through the mount moved this directory
	// (Rename), with the engine's promises there. The kernel goes on
	// using this node for the new name until it forgets it (forget,
	// queued by Rename): meanwhile the directory and its children are
	// found at the new place.
	movedTo atomic.Pointer[movedDir]
}

// movedDir is a directory's new place and what the engine promises there.
type movedDir struct {
	rel      string
	promises session.Promises
}

// dir is the directory's store path now: where an archive moved it, or
// where its session went (life.go). A session deleted while the
// directory was held leaves it nowhere: its old path, which the engine
// is asked nothing of (here).
func (d *dirNode) dir() string {
	rel, _ := d.here()
	return rel
}

// here is dir, and ENOENT for a directory of a session deleted while it
// was held (a working directory), whose old path may hold a session made
// anew since: nothing is looked up, listed or changed there through it.
func (d *dirNode) here() (string, syscall.Errno) {
	if p := d.movedTo.Load(); p != nil {
		return p.rel, 0
	}
	rel, bad := d.now()
	if bad != 0 {
		return d.rel, bad
	}
	return rel, 0
}

// gone is here's errno alone.
func (d *dirNode) gone() syscall.Errno {
	_, bad := d.here()
	return bad
}

// promised is what the engine promises of the directory's listing now.
func (d *dirNode) promised() session.Promises {
	if p := d.movedTo.Load(); p != nil {
		return p.promises
	}
	return d.promises
}

var (
	_ = (fs.NodeLookuper)((*dirNode)(nil))
	_ = (fs.NodeOpendirHandler)((*dirNode)(nil))
	_ = (fs.NodeGetattrer)((*dirNode)(nil))
	_ = (fs.NodeSetattrer)((*dirNode)(nil))
	_ = (fs.NodeMkdirer)((*dirNode)(nil))
	_ = (fs.NodeCreater)((*dirNode)(nil))
	_ = (fs.NodeUnlinker)((*dirNode)(nil))
	_ = (fs.NodeRmdirer)((*dirNode)(nil))
	_ = (fs.NodeRenamer)((*dirNode)(nil))
	_ = (fs.NodeSymlinker)((*dirNode)(nil))
	_ = (fs.NodeLinker)((*dirNode)(nil))
	_ = (fs.NodeMknoder)((*dirNode)(nil))
	_ = (fs.NodeStatfser)((*dirNode)(nil))
)

func (d *dirNode) child(name string) string { return d.dir() + "/" + name }

func (d *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if bad := d.gone(); bad != 0 {
		return nil, bad
	}
	gen := d.m.ms.gen.Load()
	rel := d.child(name)
	n, err := d.m.e.Lookup(callerUid(ctx), rel)
	if err != nil {
		return nil, errno(err)
	}
	return d.m.attach(ctx, d.EmbeddedInode(), n, rel, out, gen)
}

// OpendirHandle opens the directory for listing. The kernel keeps the
// listing of a directory the engine says it may (session.Promises,
// FOPEN_CACHE_DIR): a warm `ls` then costs an
// OPENDIR and nothing per entry, where each listing was a READDIRPLUS
// that looked up every entry in the store. The listing is made at the
// first read, not here: a kernel serving it from its cache reads nothing.
// The handle counts against the opener's quota of open files (openDir).
func (d *dirNode) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	var fl uint32
	if d.promised().CacheListing {
		fl = fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE
	}
	return d.m.openDir(ctx, d.listing, fl)
}

// openDir opens a directory listed by list, counted against the opener's
// quota of open files like any open file: an open directory holds its
// listing until its last close, so a user who kept directories open
// without a bound held the server's memory (300 opens of a directory of
// 2,000 names took it from 21 to 118 MiB). The count of handles alone did
// not bound the listings' bytes: see dirHandle.stream.
func (m *mountState) openDir(ctx context.Context, list func(context.Context) ([]fuse.DirEntry, syscall.Errno), flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return m.opened(ctx, func() (fs.FileHandle, uint32, syscall.Errno) {
		return &dirHandle{list: list, buffered: newBuffered(m, callerUid(ctx))}, flags, 0
	})
}

// dirHandle is one open directory: its listing, made when first read.
type dirHandle struct {
	held
	list func(context.Context) ([]fuse.DirEntry, syscall.Errno)
	mu   sync.Mutex
	ds   fs.DirStream
	// buffered counts the listing in the opener's share of
	// quota.Limits.Partial while the handle holds it.
	buffered buffered
}

var (
	_ = (fs.FileReaddirenter)((*dirHandle)(nil))
	_ = (fs.FileSeekdirer)((*dirHandle)(nil))
	_ = (fs.FileReleasedirer)((*dirHandle)(nil))
)

func (h *dirHandle) stream(ctx context.Context) (fs.DirStream, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ds == nil {
		ents, bad := h.list(ctx)
		if bad != 0 {
			return nil, bad
		}
		// The listing is the opener's until the last close, counted with
		// its unfinished bytes (EAGAIN past them, nothing kept; a later
		// read lists again), as a copy of index/list is: a uid's 1,024
		// open files each held a listing of a directory it had filled
		// with up to 200,000 names (200 of 30,000 names took the server
		// 986 MiB further: TestDirListingsCounted).
		if err := h.buffered.keep(listingBytes(ents)); err != nil {
			return nil, errno(err)
		}
		h.ds = fs.NewListDirStream(ents)
	}
	return h.ds, 0
}

// direntBytes is what a listing holds for each entry besides its name.
const direntBytes = int(unsafe.Sizeof(fuse.DirEntry{}))

// listingBytes is what a listing holds in memory: each entry and its name.
func listingBytes(ents []fuse.DirEntry) int {
	n := len(ents) * direntBytes
	for _, e := range ents {
		n += len(e.Name)
	}
	return n
}

func (h *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	ds, errno := h.stream(ctx)
	if errno != 0 || !ds.HasNext() {
		return nil, errno
	}
	e, errno := ds.Next()
	return &e, errno
}

func (h *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	ds, errno := h.stream(ctx)
	if errno != 0 {
		return errno
	}
	if sd, ok := ds.(fs.FileSeekdirer); ok {
		return sd.Seekdir(ctx, off)
	}
	return syscall.ENOTSUP
}

// Releasedir is the last close: the listing is dropped and the handle's
// place in the quota given back.
func (h *dirHandle) Releasedir(ctx context.Context, flags uint32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ds != nil {
		h.ds.Close()
		h.ds = nil
	}
	h.buffered.keep(0)
	h.giveBack()
}

// listing is the directory's entries now, for a handle (openDir).
func (d *dirNode) listing(ctx context.Context) ([]fuse.DirEntry, syscall.Errno) {
	if bad := d.gone(); bad != 0 {
		return nil, bad
	}
	ents, err := d.m.e.ReadDir(d.dir())
	if err != nil {
		return nil, errno(err)
	}
	list := make([]fuse.DirEntry, 0, len(ents))
	for _, e := range ents {
		de := fuse.DirEntry{Name: e.Name, Mode: syscall.S_IFREG, Ino: inoOf(d.child(e.Name))}
		if e.Dir {
			de.Mode = syscall.S_IFDIR
		}
		if e.FreeRoot {
			de.Ino = freeIno(e.Ino) // a free tree's root is numbered as its store inode
		}
		list = append(list, de)
	}
	return list, 0
}

func (d *dirNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.gave() // before the stat: see tracked
	rel, bad := d.here()
	if bad != 0 {
		return bad
	}
	pl := layout.Classify(rel)
	out.SetTimeout(attrTimeout(true, d.promised()))
	st, err := d.m.e.Stat(rel)
	if err != nil {
		return errno(err)
	}
	storeAttr(&out.Attr, st, inoOf(rel), rel, pl) // rel, not the node's: where it moved to (dir)
	d.stampAttr(&out.Attr)
	return 0
}

// Setattr: root sets a shared space's group and mode this way (SPEC 2).
// The files whose owner and mode are the directory's (ctl, the index's
// virtual files) change with it. The change is of the directory where it
// is now (dir): one archived through the mount and still held (a working
// directory) is read only there, where its old path may hold a session
// made anew since, whose times it changed.
func (d *dirNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if bad := d.gone(); bad != 0 {
		return bad
	}
	if err := d.m.e.Setattr(callerOf(ctx), d.dir(), setattrOf(in)); err != nil {
		return errno(err)
	}
	if errno := d.Getattr(ctx, nil, out); errno != 0 {
		return errno
	}
	for _, ch := range d.Children() {
		switch ch.Operations().(type) {
		case *ctlNode, *listNode, *indexValueNode:
			staleAttrs(ch)
		}
	}
	return 0
}

// Mkdir makes a session or a structural directory; the engine decides.
func (d *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if bad := d.gone(); bad != 0 {
		return nil, bad
	}
	rel := d.child(name)
	if err := d.m.e.MkdirAt(callerOf(ctx), rel); err != nil {
		return nil, errno(err)
	}
	d.m.changed(rel)
	return d.Lookup(ctx, name, out)
}

// Create makes only the index values a user may write (current,
// by-hash/<key>, by-uuid/<uuid>); the value is committed when it is
// closed.
func (d *dirNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if bad := d.gone(); bad != 0 {
		return nil, nil, 0, bad
	}
	rel := d.child(name)
	pl, err := d.m.e.CheckCreate(rel)
	if err != nil {
		return nil, nil, 0, errno(err)
	}
	gen := d.m.ms.gen.Load()
	ch, errno := d.m.attach(ctx, d.EmbeddedInode(), session.Node{Place: pl, Virtual: true}, rel, out, gen)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	fh, fl, errno := ch.Operations().(fs.NodeOpener).Open(ctx, flags)
	return ch, fh, fl, errno
}

// Symlink, Link and Mknod: the engine answers (the ABI holds none).
func (d *dirNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, errno(d.m.e.MakeNode(d.child(name)))
}

func (d *dirNode) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, errno(d.m.e.MakeNode(d.child(name)))
}

func (d *dirNode) Mknod(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, errno(d.m.e.MakeNode(d.child(name)))
}

func (d *dirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	if bad := d.gone(); bad != 0 {
		return bad
	}
	return errno(d.m.e.Unlink(callerOf(ctx), d.child(name)))
}

func (d *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	if bad := d.gone(); bad != 0 {
		return bad
	}
	return errno(d.m.e.Rmdir(callerOf(ctx), d.child(name)))
}

// Rename: only the engine knows which entries may move (SPEC 12).
func (d *dirNode) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if bad := d.gone(); bad != 0 {
		return bad
	}
	newRel := ""
	if p, ok := newParent.(*dirNode); ok {
		newRel = p.child(newName)
	}
	if err := d.m.e.Rename(callerOf(ctx), d.child(name), newRel, flags); err != nil {
		return errno(err)
	}
	if child := d.GetChild(name); child != nil {
		if moved, ok := child.Operations().(*dirNode); ok {
			moved.movedTo.Store(&movedDir{rel: newRel, promises: d.m.promisesAt(ctx, newRel)})
		}
	}
	d.m.ms.forget(newRel) // and then the kernel makes a node for the new place
	return 0
}

// promisesAt is what the engine promises of the directory rel's listing
// (none when it cannot say: the kernel then always asks).
func (m *mountState) promisesAt(ctx context.Context, rel string) session.Promises {
	n, err := m.e.Lookup(callerUid(ctx), rel)
	if err != nil {
		return session.Promises{}
	}
	return n.Promises
}

// Statfs reports the store's filesystem (df, and tools that check space).
func (d *dirNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	s, err := d.m.e.Statfs()
	if err != nil {
		return errno(err)
	}
	fromStatfs(out, s)
	return 0
}
