package fs

import (
	"bytes"
	"context"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ctxfs/ctxfs/session/layout"
)

// maxValueBytes bounds what one open file buffers for a single value
// (meta.json is the largest); more is EFBIG.
const maxValueBytes = 1 << 20

// maxJudgedBytes bounds what one open file's writes have judged, in all
// (valueHandle.Write): each judgement reads the whole buffer, so a writer
// of many pieces that end in a newline would otherwise cost the server
// time quadratic in the value. Twice the largest value lets a value
// written in one write(2) (or the FUSE writes one write(2) became) be
// judged at its last piece after a false start; past the bound the close
// judges.
const maxJudgedBytes = 2 * maxValueBytes

// valueNode is state, cwd or meta.json (SPEC 5): served from the engine's
// memory (Engine.Value), replaced whole through the engine when the
// writer closes.
type valueNode struct {
	storeNode
}

var (
	_ = (fs.NodeOpener)((*valueNode)(nil))
	_ = (fs.NodeReader)((*valueNode)(nil))
	_ = (fs.NodeGetattrer)((*valueNode)(nil))
	_ = (fs.NodeSetattrer)((*valueNode)(nil))
)

func (n *valueNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	return n.valueAttr(out)
}

// valueAttr describes a value the engine serves from memory: its size,
// and the store file's owner, mode and times.
func (n *storeNode) valueAttr(out *fuse.AttrOut) syscall.Errno {
	if n.ended() != 0 {
		// Its session is gone from its path: the archived file, from
		// the store (the engine's memory holds live values only).
		out.SetTimeout(cacheTimeout)
		return n.statAttr(&out.Attr)
	}
	v, err := n.m.e.Value(n.rel)
	if err != nil {
		return errno(err)
	}
	out.SetTimeout(cacheTimeout)
	storeAttr(&out.Attr, &v.Stat, n.id.ino, n.rel, n.place)
	n.stampAttr(&out.Attr)
	return 0
}

// Setattr: `>` truncates before writing (SETATTR size=0), which the
// engine takes as a no-op: the value is replaced whole at close.
func (n *valueNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return n.setattr(ctx, in, out, n.Getattr)
}

// Open: a reader reads a copy taken at open (openCopy); a writer gets a
// buffer that is committed at close. Every open counts against the
// opener's quota of open files.
func (n *valueNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if fh, fl, bad, ok := n.openEnded(ctx, flags); ok {
		return fh, fl, bad
	}
	if fh, fl, errno, ok := n.m.openCopy(ctx, flags, n.value); ok {
		return fh, fl, errno
	}
	return n.m.opened(ctx, func() (fs.FileHandle, uint32, syscall.Errno) { return n.open(ctx, flags) })
}

func (n *valueNode) open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	h := n.m.newValueHandle(n.where, func(c layout.Caller, data []byte) error {
		if bad := n.ended(); bad != 0 {
			return bad // its session is gone from the path: not a new one's value
		}
		return n.m.e.WriteFile(c, n.place.Ref(), n.place.File, data)
	})
	if isRead(flags) {
		v, err := n.m.e.Value(n.rel)
		if err != nil {
			return nil, 0, errno(err)
		}
		var bad syscall.Errno
		if h.snapshot, bad = n.m.holdCopy(ctx, v.Data); bad != 0 {
			return nil, 0, bad
		}
	}
	if isWrite(flags) {
		h.writer(ctx, n.m)
	}
	return h, fuse.FOPEN_DIRECT_IO, 0
}

// Read serves a handle's reads from its copy (readNow).
func (n *valueNode) Read(ctx context.Context, f fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return readNow(ctx, f, n.value, dest, off)
}

// value is the content the engine serves from memory (Engine.Value).
func (n *storeNode) value() ([]byte, error) {
	v, err := n.m.e.Value(n.rel)
	return v.Data, err
}

// readNow serves a read: from the handle when it reads (a copy taken at
// open), else (a READ with no handle of ours) from content as it is now.
func readNow(ctx context.Context, f fs.FileHandle, content func() ([]byte, error), dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if r, ok := f.(fs.FileReader); ok {
		return r.Read(ctx, dest, off)
	}
	b, err := content()
	if err != nil {
		return nil, errno(err)
	}
	return readAt(b, dest, off), 0
}

// openCopy opens a file the engine serves from memory (a value, an
// index value, a timestamp) for a reader, given its content now; ok is
// false when the open needs more (a writer: the caller opens it with a
// buffer; or the content cannot be had: that open reports why).
//
// The reader reads a copy taken at open, with FOPEN_DIRECT_IO, and
// FOPEN_NOFLUSH (its close has nothing to flush): one open, one value,
// however many reads it makes and whatever changes meanwhile. Through the
// kernel's page cache a value replaced in place could not be read whole:
// the kernel takes a new size or mtime first and drops the old page
// after, and a reader between the two was served the old page cut or
// padded with zeros to the new size ("/c\n\0\0…", "/bb"); a reader's
// second read(2) after a change read the new value's tail after the old
// one's head ("idle\ne\n"). TestValueReadsWhole. It costs a `cat` a
// READ, and its end of file a second (docs/benchmarks.md#small-value-opens).
func (m *mountState) openCopy(ctx context.Context, flags uint32, content func() ([]byte, error)) (fs.FileHandle, uint32, syscall.Errno, bool) {
	if isWrite(flags) {
		return nil, 0, 0, false
	}
	b, err := content()
	if err != nil {
		return nil, 0, 0, false // the caller's open reports the error
	}
	fh, fl, errno := m.opened(ctx, func() (fs.FileHandle, uint32, syscall.Errno) {
		c, bad := m.holdCopy(ctx, b)
		if bad != 0 {
			return nil, 0, bad
		}
		return &roHandle{snapshot: c}, fuse.FOPEN_DIRECT_IO | fuse.FOPEN_NOFLUSH, 0
	})
	return fh, fl, errno, true
}

// readAt is what a read of size len(dest) at off returns from data.
func readAt(data, dest []byte, off int64) fuse.ReadResult {
	if off >= int64(len(data)) {
		return fuse.ReadResultData(nil)
	}
	return fuse.ReadResultData(data[off:min(int64(len(data)), off+int64(len(dest)))])
}

// newValueHandle is a handle of a value of place w: a write that makes
// the value whole (it ends in a newline, and for meta.json it is no
// longer an unfinished JSON value) and bad fails at once with the
// commit's errno (the engine's CheckValue; shells ignore close errors),
// and commit judges the value again at close.
func (m *mountState) newValueHandle(w where, commit func(layout.Caller, []byte) error) *valueHandle {
	return &valueHandle{
		check:   func(b []byte) error { return m.e.CheckValue(w.place, b) },
		commit:  commit,
		changed: func() { m.changed(w.rel) },
	}
}

// writer makes the handle its opener's to write: the value is committed
// as the opener's, and its buffer counts in the opener's share of
// quota.Limits.Partial. A value is at most 1 MiB, but a user's
// descriptors each held one until their last close, uncounted (300 of
// one uid held 386 MiB of the server).
func (h *valueHandle) writer(ctx context.Context, m *mountState) {
	h.caller = callerOf(ctx)
	h.buffered = newBuffered(m, h.caller.Uid)
}

// valueHandle buffers a single value until close, so readers never see
// half of it and the engine judges it whole. Reads serve the value as it
// was at open.
type valueHandle struct {
	held
	commit   func(layout.Caller, []byte) error
	check    func([]byte) error // of a complete value (ending in "\n"); may be nil
	changed  func()
	released func() // after the last close; may be nil
	caller   layout.Caller
	snapshot heldCopy // what a reader reads: the value at open

	mu  sync.Mutex
	buf []byte
	// buffered counts buf in the writer's share of unfinished bytes
	// (writer), from its first write to the last close.
	buffered buffered
	dirty    bool
	judged   int // bytes check has read at this handle's writes (maxJudgedBytes)
}

var (
	_ = (fs.FileReader)((*valueHandle)(nil))
	_ = (fs.FileWriter)((*valueHandle)(nil))
	_ = (fs.FileFlusher)((*valueHandle)(nil))
	_ = (fs.FileReleaser)((*valueHandle)(nil))
)

func (h *valueHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return readAt(h.snapshot.data, dest, off), 0
}

// Write places data at off in the new value. When the value then ends in
// a newline it is judged (check): a bad one fails here, with the errno
// the close would give, and leaves the buffer as it was, so a shell's
// `echo … > FILE` (the whole value in one write) fails visibly. A value
// judged unfinished, or one past maxJudgedBytes, is judged at close.
func (h *valueHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	end := off + int64(len(data))
	if off < 0 || end > maxValueBytes {
		return 0, syscall.EFBIG
	}
	size := max(len(h.buf), int(end))
	if err := h.buffered.keep(size); err != nil {
		return 0, errno(err) // over the writer's share: nothing of this write is kept
	}
	nb := make([]byte, size)
	copy(nb, h.buf)
	copy(nb[off:], data)
	if h.check != nil && bytes.HasSuffix(nb, []byte("\n")) && h.judged+len(nb) <= maxJudgedBytes {
		h.judged += len(nb)
		if err := h.check(nb); err != nil {
			h.buffered.keep(len(h.buf)) // gives back the growth
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
	h.mu.Lock()
	h.buf = nil
	h.buffered.keep(0)
	h.snapshot.drop()
	h.mu.Unlock()
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
