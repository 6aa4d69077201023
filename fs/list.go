package fs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// listNode is index/list, served from the engine's index (always current)
// rather than the store's snapshot, which is written at most once a second.
// It is read only: mode 0400 within what index/ allows (0440 in a group
// space), owned like index/.
type listNode struct {
	storeNode
}

var (
	_ = (fs.NodeOpener)((*listNode)(nil))
	_ = (fs.NodeGetattrer)((*listNode)(nil))
	_ = (fs.NodeSetattrer)((*listNode)(nil))
)

// Setattr: the list is the index's; the engine refuses a truncation or a
// change of owner or mode, and takes a touch as a no-op.
func (n *listNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return n.setattr(ctx, in, out, n.Getattr)
}

func (n *listNode) content() ([]byte, syscall.Errno) {
	b, err := n.m.e.IndexList(n.place.Container)
	return b, errno(err)
}

// Getattr reports the exact size of the list as it is now (kept by the
// kernel until the index announces a change: Index.OnChange).
func (n *listNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.SetTimeout(cacheTimeout)
	b, errno := n.content()
	if errno != 0 {
		return errno
	}
	return n.virtualAttr(&out.Attr, 0o444, len(b))
}

// Open takes a snapshot: a reader sees one consistent list. It is read
// with FOPEN_DIRECT_IO: the list can span many pages, and pages cached
// from two snapshots would mix two orders.
// Open counts the handle against the opener's quota of open files.
func (n *listNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return n.m.opened(ctx, func() (fs.FileHandle, uint32, syscall.Errno) { return n.open(ctx, flags) })
}

func (n *listNode) open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if err := n.m.e.CheckOpen(n.place, int(flags)); err != nil {
		return nil, 0, errno(err)
	}
	b, e := n.content()
	if e != 0 {
		return nil, 0, e
	}
	// A list of a few hundred sessions held open 1,000 times made the
	// server hold 26 MB, uncounted (heldCopy).
	c, bad := n.m.holdCopy(ctx, b)
	if bad != 0 {
		return nil, 0, bad
	}
	h := &valueHandle{snapshot: c}
	return h, fuse.FOPEN_DIRECT_IO, 0
}
