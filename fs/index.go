package fs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/index"
	"github.com/ctxfs/ctxfs/session"
)

// indexValueNode is index/current or an entry of by-cwd/, by-hash/,
// by-uuid/ (SPEC 9). Values come from the engine's index, which is always
// current; current, by-hash and by-uuid are written through it.
type indexValueNode struct {
	storeNode
}

var (
	_ = (fs.NodeOpener)((*indexValueNode)(nil))
	_ = (fs.NodeGetattrer)((*indexValueNode)(nil))
	_ = (fs.NodeSetattrer)((*indexValueNode)(nil))
)

func (n *indexValueNode) index() (*index.Index, error) { return n.m.e.Index(n.place.Container) }

// value is the session name the place holds; ENOENT when none.
func (n *indexValueNode) value() (string, error) {
	x, err := n.index()
	if err != nil {
		return "", err
	}
	if n.place.Kind == session.PlaceIndexCurrent {
		if cur := x.Current(); cur != "" {
			return cur, nil
		}
		return "", syscall.ENOENT
	}
	return x.Lookup(n.place.IndexKind, n.place.Key)
}

// Getattr: owner and mode of the store file, or of index/ for a value just
// being created; the size of the value the index holds. by-cwd entries are
// read only (mode without write bits).
func (n *indexValueNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.SetTimeout(fileAttrTimeout)
	size := 0
	if v, err := n.value(); err == nil {
		size = len(v) + 1
	}
	readOnly := !n.place.WritableIndex()
	if errno := n.statAttr(&out.Attr, readOnly); errno != 0 {
		perm := uint32(0o666)
		if readOnly {
			perm = 0o444
		}
		return n.virtualAttr(&out.Attr, perm, size)
	}
	out.Attr.Size = uint64(size)
	setBlocks(&out.Attr)
	return 0
}

func (n *indexValueNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if errno := truncateOK(in); errno != 0 {
		return errno
	}
	if !onlyTimes(in) {
		return syscall.EPERM // the index owns its files' modes
	}
	return n.Getattr(ctx, f, out)
}

func (n *indexValueNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if isWrite(flags) && !n.place.WritableIndex() {
		return nil, 0, syscall.EPERM
	}
	h := &valueHandle{check: n.check, commit: n.commit, changed: func() { n.m.changed(n.rel) }}
	// An entry created by open(O_CREAT) whose value was refused (or never
	// written) holds nothing: its name must not stay in the kernel's
	// cache once the creator closes it.
	h.released = func() {
		if _, err := n.value(); err != nil {
			n.m.changed(n.rel)
		}
	}
	if isRead(flags) {
		if v, err := n.value(); err == nil {
			h.snapshot = []byte(v + "\n")
		}
	}
	if isWrite(flags) {
		h.caller = callerOf(ctx)
	}
	return h, fuse.FOPEN_DIRECT_IO, 0
}

// check fails a write of a complete value that names no session at once.
func (n *indexValueNode) check(data []byte) error {
	name, err := index.ParseValue(data)
	if err != nil {
		return err
	}
	r := session.Ref{Container: n.place.Container, Name: name}
	if !n.m.e.SessionExists(r) {
		return abi.Errorf(syscall.ENOENT, "write", "no session %q", name)
	}
	return nil
}

func (n *indexValueNode) commit(c session.Caller, data []byte) error {
	name, err := index.ParseValue(data)
	if err != nil {
		return err
	}
	x, err := n.index()
	if err != nil {
		return err
	}
	if n.place.Kind == session.PlaceIndexCurrent {
		return x.SetCurrent(name)
	}
	return x.SetEntry(n.place.IndexKind, n.place.Key, name)
}
