package fs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ctxfs/ctxfs/session/layout"
)

// indexValueNode is index/current or an entry of by-cwd/, by-hash/,
// by-uuid/ (SPEC 9). Values come from the engine's index, which is always
// current; current, by-hash and by-uuid are written through it.
type indexValueNode struct {
	storeNode
}

var (
	_ = (fs.NodeOpener)((*indexValueNode)(nil))
	_ = (fs.NodeReader)((*indexValueNode)(nil))
	_ = (fs.NodeGetattrer)((*indexValueNode)(nil))
	_ = (fs.NodeSetattrer)((*indexValueNode)(nil))
)

// Getattr: owned like index/ (the value lives in the index, not in a file
// of its own as far as readers are concerned); the size of the value the
// index holds. by-cwd entries are read only (mode without write bits).
func (n *indexValueNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.SetTimeout(cacheTimeout)
	b, _ := n.content()
	return n.virtualAttr(&out.Attr, uint32(layout.VirtualPerm(n.place)), len(b))
}

// content is the value as the index holds it now: a name and a newline,
// nothing when the entry is not (or no longer) there.
func (n *indexValueNode) content() ([]byte, error) {
	v, err := n.m.e.IndexValue(n.place)
	if err != nil {
		return nil, nil
	}
	return []byte(v + "\n"), nil
}

func (n *indexValueNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return n.setattr(ctx, in, out, n.Getattr)
}

// Open: a reader reads the value as the index held it at open
// (openCopy); a writer gets a buffer committed at close. Every open
// counts against the opener's quota of open files. A create, even one
// for reading only, takes the writer's handle, whose close drops from
// the kernel's cache the name of an entry never written (open).
func (n *indexValueNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_CREAT == 0 && n.m.e.CheckOpen(n.place, int(flags)) == nil {
		if fh, fl, errno, ok := n.m.openCopy(ctx, flags, n.content); ok {
			return fh, fl, errno
		}
	}
	return n.m.opened(ctx, func() (fs.FileHandle, uint32, syscall.Errno) { return n.open(ctx, flags) })
}

func (n *indexValueNode) open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if err := n.m.e.CheckOpen(n.place, int(flags)); err != nil {
		return nil, 0, errno(err)
	}
	h := n.m.newValueHandle(n.where, func(c layout.Caller, data []byte) error {
		return n.m.e.WriteIndex(c, n.place, data)
	})
	// An entry created by open(O_CREAT) whose value was refused (or never
	// written) holds nothing: its name must not stay in the kernel's
	// cache once the creator closes it.
	h.released = func() {
		if _, err := n.m.e.IndexValue(n.place); err != nil {
			n.m.changed(n.rel)
		}
	}
	if isRead(flags) {
		b, _ := n.content()
		var bad syscall.Errno
		if h.snapshot, bad = n.m.holdCopy(ctx, b); bad != 0 {
			return nil, 0, bad
		}
	}
	if isWrite(flags) {
		h.writer(ctx, n.m)
	}
	return h, fuse.FOPEN_DIRECT_IO, 0
}

// Read: see readNow.
func (n *indexValueNode) Read(ctx context.Context, f fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return readNow(ctx, f, n.content, dest, off)
}
