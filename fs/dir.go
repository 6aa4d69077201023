package fs

import (
	"context"
	"os"
	"strconv"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ctxfs/ctxfs/session"
)

// dirNode is a directory of the ABI (everything but the free trees): it
// lists the store, hiding the store's dot names and anything the ABI does
// not allow, and lets only the names of session.Classify be created.
type dirNode struct {
	storeNode
}

var (
	_ = (fs.NodeLookuper)((*dirNode)(nil))
	_ = (fs.NodeReaddirer)((*dirNode)(nil))
	_ = (fs.NodeGetattrer)((*dirNode)(nil))
	_ = (fs.NodeSetattrer)((*dirNode)(nil))
	_ = (fs.NodeMkdirer)((*dirNode)(nil))
	_ = (fs.NodeCreater)((*dirNode)(nil))
	_ = (fs.NodeUnlinker)((*dirNode)(nil))
	_ = (fs.NodeRmdirer)((*dirNode)(nil))
	_ = (fs.NodeRenamer)((*dirNode)(nil))
)

func (d *dirNode) child(name string) (string, session.Place) {
	rel := d.rel + "/" + name
	return rel, session.Classify(rel)
}

func (d *dirNode) archived() bool { return d.place.Kind == session.PlaceArchived }

func (d *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	rel, pl := d.child(name)
	if !pl.Exists() {
		return nil, syscall.ENOENT
	}
	switch pl.Kind {
	case session.PlaceHome:
		d.ensureOwnHome(ctx, name)
	case session.PlaceIndex:
		d.m.e.Index(pl.Container) // loading the index makes index/ in the store
	}
	node, typ, errno := d.m.newNode(rel, pl)
	if errno != 0 {
		return nil, errno
	}
	return attach(ctx, d.EmbeddedInode(), node, typ, rel, out)
}

// ensureOwnHome: a uid's own home appears on first use (SPEC 2). Another
// uid's missing home stays missing. A failure shows as the ENOENT of the
// lookup that follows.
func (d *dirNode) ensureOwnHome(ctx context.Context, name string) {
	c := callerOf(ctx)
	if name == strconv.FormatUint(uint64(c.Uid), 10) && c.Uid != nobody {
		d.m.e.EnsureHome(c.Uid)
	}
}

func (d *dirNode) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	if d.place.Kind == session.PlaceSessions {
		d.m.e.Index(d.place.Container) // so that index/ is listed from the start
	}
	ents, err := os.ReadDir(d.path())
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	seen := map[string]bool{}
	var list []fuse.DirEntry
	addIno := func(name string, mode uint32, ino uint64) {
		if seen[name] {
			return
		}
		seen[name] = true
		list = append(list, fuse.DirEntry{Name: name, Mode: mode, Ino: ino})
	}
	add := func(name string, mode uint32) { addIno(name, mode, inoOf(d.rel+"/"+name)) }
	for _, e := range ents {
		_, pl := d.child(e.Name())
		if !pl.Exists() || pl.Kind == session.PlaceCtl {
			continue
		}
		mode := uint32(syscall.S_IFREG)
		if e.IsDir() {
			mode = syscall.S_IFDIR
		} else if !e.Type().IsRegular() {
			continue // the store holds only directories and regular files
		}
		ino := inoOf(d.rel + "/" + e.Name())
		if pl.Kind == session.PlaceFreeRoot {
			// A free tree's root is numbered as its loopback (attach).
			if info, err := e.Info(); err == nil {
				if st, ok := info.Sys().(*syscall.Stat_t); ok {
					ino = loopbackID(d.m.loop, st).Ino
				}
			}
		}
		addIno(e.Name(), mode, ino)
	}
	d.addVirtual(add)
	return fs.NewListDirStream(list), 0
}

// addVirtual lists the files the store does not hold: ctl in a session
// directory, list in index/ (the store's snapshot may lag behind).
func (d *dirNode) addVirtual(add func(string, uint32)) {
	switch d.place.Kind {
	case session.PlaceSession:
		add("ctl", syscall.S_IFREG)
	case session.PlaceIndex:
		add("list", syscall.S_IFREG)
	}
}

func (d *dirNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.SetTimeout(dirAttrTimeout)
	return d.statAttr(&out.Attr, d.archived())
}

// Setattr passes mode, owner and time changes to the store directory: root
// sets a shared space's group and mode this way (SPEC 2).
func (d *dirNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if d.archived() {
		return syscall.EPERM
	}
	if _, ok := in.GetSize(); ok {
		return syscall.EISDIR
	}
	if errno := d.setattr(in); errno != 0 {
		return errno
	}
	return d.Getattr(ctx, f, out)
}

// Mkdir creates a session directory (CreateSession) or a structural
// directory (Mkdir); the engine owns both and decides who may.
func (d *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	rel, pl := d.child(name)
	if errno := creatable(d, pl); errno != 0 {
		return nil, errno
	}
	if !pl.IsDir() {
		return nil, syscall.EPERM
	}
	c := callerOf(ctx)
	var err error
	if pl.Kind == session.PlaceSession {
		err = d.m.e.CreateSession(c, pl.Ref())
	} else {
		err = d.m.e.Mkdir(c, rel)
	}
	if err != nil {
		return nil, errno(err)
	}
	d.m.changed(rel)
	return d.Lookup(ctx, name, out)
}

// creatable is the common answer for names that may never be created:
// EPERM outside the ABI and in archives, EINVAL for a bad name in a slot.
func creatable(d *dirNode, pl session.Place) syscall.Errno {
	switch {
	case d.archived():
		return syscall.EPERM
	case pl.Kind == session.PlaceBadName:
		return syscall.EINVAL
	case !pl.Exists():
		return syscall.EPERM
	}
	return 0
}

// Create makes only index entries that the mount may write (current,
// by-hash/<key>, by-uuid/<uuid>); the value is committed when it is closed.
// Every other ABI file is made by the engine.
func (d *dirNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	rel, pl := d.child(name)
	if errno := creatable(d, pl); errno != 0 {
		return nil, nil, 0, errno
	}
	if !pl.WritableIndex() {
		return nil, nil, 0, syscall.EPERM
	}
	node := &indexValueNode{storeNode: storeNode{where: where{m: d.m, rel: rel, place: pl}}}
	var ao fuse.AttrOut
	if errno := node.Getattr(ctx, nil, &ao); errno != 0 {
		return nil, nil, 0, errno
	}
	out.Attr = ao.Attr
	out.SetAttrTimeout(fileAttrTimeout)
	ch := d.NewInode(ctx, node, fs.StableAttr{Mode: syscall.S_IFREG, Ino: inoOf(rel), Gen: 1})
	fh, fl, errno := node.Open(ctx, flags)
	return ch, fh, fl, errno
}

var (
	_ = (fs.NodeSymlinker)((*dirNode)(nil))
	_ = (fs.NodeLinker)((*dirNode)(nil))
	_ = (fs.NodeMknoder)((*dirNode)(nil))
)

// Symlink, Link and Mknod: the ABI holds only the directories and regular
// files the engine makes, so no name of it may be made this way (EPERM;
// EINVAL for a bad name in a name slot, as for mkdir).
func (d *dirNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, d.notCreatable(name)
}

func (d *dirNode) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, d.notCreatable(name)
}

func (d *dirNode) Mknod(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, d.notCreatable(name)
}

func (d *dirNode) notCreatable(name string) syscall.Errno {
	_, pl := d.child(name)
	if errno := creatable(d, pl); errno != 0 {
		return errno
	}
	return syscall.EPERM
}

// Unlink removes by-hash and by-uuid entries; every other ABI entry stays.
func (d *dirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	_, pl := d.child(name)
	if !pl.WritableIndex() || pl.Kind != session.PlaceIndexEntry || d.archived() {
		return syscall.EPERM
	}
	x, err := d.m.e.Index(pl.Container)
	if err != nil {
		return errno(err)
	}
	if err := x.RemoveEntry(pl.IndexKind, pl.Key); err != nil {
		return errno(err)
	}
	return 0
}

// Rmdir: a non-empty directory is ENOTEMPTY, as anywhere; an empty ABI
// directory still may not go (EPERM).
func (d *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	rel, _ := d.child(name)
	f, err := os.Open(d.m.storePath(rel))
	if err != nil {
		return fs.ToErrno(err)
	}
	defer f.Close()
	if names, _ := f.Readdirnames(1); len(names) > 0 {
		return syscall.ENOTEMPTY
	}
	return syscall.EPERM
}

// renameFlags are the rename flags the kernel may pass (NOREPLACE,
// EXCHANGE, WHITEOUT).
const renameFlags = 1 | 2 | 4

// Rename: ABI entries are never renamed through the mount. (Archiving a
// session, SPEC 12, needs the engine to hold the session lock and fix the
// index; it is not served here yet.)
func (d *dirNode) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if flags&^renameFlags != 0 {
		return syscall.EINVAL
	}
	return syscall.EPERM
}

var _ = (fs.NodeStatfser)((*dirNode)(nil))

// Statfs reports the store's filesystem (df, and tools that check space).
func (d *dirNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	var s syscall.Statfs_t
	if err := syscall.Statfs(d.m.store, &s); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStatfsT(&s)
	return 0
}
