package fs

import (
	"bytes"
	"context"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ctxfs/ctxfs/session"
)

// maxValueBytes bounds what one open file buffers for a single value
// (meta.json is the largest); more is EFBIG.
const maxValueBytes = 1 << 20

// valueNode is state, cwd or meta.json (SPEC 5): read from the store,
// replaced whole through the engine when the writer closes.
type valueNode struct {
	storeNode
}

var (
	_ = (fs.NodeOpener)((*valueNode)(nil))
	_ = (fs.NodeGetattrer)((*valueNode)(nil))
	_ = (fs.NodeSetattrer)((*valueNode)(nil))
)

func (n *valueNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.SetTimeout(fileAttrTimeout)
	return n.statAttr(&out.Attr)
}

// Setattr: `>` truncates before writing (SETATTR size=0), which the
// engine takes as a no-op: the value is replaced whole at close.
func (n *valueNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return n.setattr(ctx, in, out, n.Getattr)
}

// Open counts the handle against the opener's quota of open files.
func (n *valueNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return n.m.opened(ctx, func() (fs.FileHandle, uint32, syscall.Errno) { return n.open(ctx, flags) })
}

func (n *valueNode) open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	h := n.m.newValueHandle(n.where, func(c session.Caller, data []byte) error {
		return n.m.e.WriteFile(c, n.place.Ref(), n.place.File, data)
	})
	if isRead(flags) {
		b, err := n.m.e.ReadFile(n.rel, maxValueBytes)
		if err != nil {
			return nil, 0, errno(err)
		}
		h.snapshot = b
	}
	if isWrite(flags) {
		h.caller = callerOf(ctx)
	}
	return h, fuse.FOPEN_DIRECT_IO, 0
}

// newValueHandle is a handle of a value of place w: a complete value that
// is plainly invalid fails its write at once (the engine's CheckValue;
// shells ignore close errors), and commit judges it whole at close.
func (m *mountState) newValueHandle(w where, commit func(session.Caller, []byte) error) *valueHandle {
	return &valueHandle{
		check:   func(b []byte) error { return m.e.CheckValue(w.place, b) },
		commit:  commit,
		changed: func() { m.changed(w.rel) },
	}
}

// valueHandle buffers a single value until close, so readers never see
// half of it and the engine judges it whole. Reads serve the value as it
// was at open.
type valueHandle struct {
	held
	commit   func(session.Caller, []byte) error
	check    func([]byte) error // of a complete value (ending in "\n"); may be nil
	changed  func()
	released func() // after the last close; may be nil
	caller   session.Caller
	snapshot []byte

	mu    sync.Mutex
	buf   []byte
	dirty bool
}

var (
	_ = (fs.FileReader)((*valueHandle)(nil))
	_ = (fs.FileWriter)((*valueHandle)(nil))
	_ = (fs.FileFlusher)((*valueHandle)(nil))
	_ = (fs.FileReleaser)((*valueHandle)(nil))
)

func (h *valueHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= int64(len(h.snapshot)) {
		return fuse.ReadResultData(nil), 0
	}
	return fuse.ReadResultData(h.snapshot[off:min(int64(len(h.snapshot)), off+int64(len(dest)))]), 0
}

// Write places data at off in the new value; a complete value that is
// plainly invalid fails here and leaves the buffer as it was.
func (h *valueHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	end := off + int64(len(data))
	if off < 0 || end > maxValueBytes {
		return 0, syscall.EFBIG
	}
	nb := make([]byte, max(int64(len(h.buf)), end))
	copy(nb, h.buf)
	copy(nb[off:], data)
	if h.check != nil && bytes.HasSuffix(nb, []byte("\n")) {
		if err := h.check(nb); err != nil {
			return 0, errno(err)
		}
	}
	h.buf, h.dirty = nb, true
	return uint32(len(data)), 0
}

// Flush commits what was written since the last commit. bash flushes
// before its first write, when nothing is pending, so nothing happens then.
func (h *valueHandle) Flush(ctx context.Context) syscall.Errno {
	return h.commitPending()
}

// Release commits a value no flush committed (the error has no one left
// to see it).
func (h *valueHandle) Release(ctx context.Context) syscall.Errno {
	h.commitPending()
	if h.released != nil {
		h.released()
	}
	h.giveBack()
	return 0
}

func (h *valueHandle) commitPending() syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.dirty {
		return 0
	}
	h.dirty = false // a refused value is not retried at release
	if err := h.commit(h.caller, h.buf); err != nil {
		return errno(err)
	}
	h.changed()
	return 0
}
