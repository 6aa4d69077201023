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

// Setattr: the list is the index's; truncating it or changing its owner
// or mode is EPERM, touching it a no-op.
func (n *listNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if _, ok := in.GetSize(); ok || !onlyTimes(in) {
		return syscall.EPERM
	}
	return n.Getattr(ctx, f, out)
}

func (n *listNode) content() ([]byte, syscall.Errno) {
	x, err := n.m.e.Index(n.place.Container)
	if err != nil {
		return nil, errno(err)
	}
	return x.ListBytes(), 0
}

// Getattr reports the exact size of the list as it is now.
func (n *listNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.SetTimeout(fileAttrTimeout)
	b, errno := n.content()
	if errno != 0 {
		return errno
	}
	return n.virtualAttr(&out.Attr, 0o444, len(b))
}

// Open takes a snapshot: a reader sees one consistent list.
func (n *listNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if isWrite(flags) {
		return nil, 0, syscall.EPERM
	}
	b, errno := n.content()
	if errno != 0 {
		return nil, 0, errno
	}
	return &valueHandle{snapshot: b}, fuse.FOPEN_DIRECT_IO, 0
}
