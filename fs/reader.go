package fs

import (
	"context"
	"io"
	"os"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/layout"
)

// storeReader reads a store file through a descriptor opened at OPEN, so a
// reader keeps reading the file it opened even when the engine replaces it.
type storeReader struct {
	f *os.File
}

func (m *mountState) openReader(ctx context.Context, rel string) (*storeReader, syscall.Errno) {
	f, err := m.e.OpenRead(callerOf(ctx), rel)
	if err != nil {
		return nil, errno(err)
	}
	return &storeReader{f: f}, 0
}

func (r *storeReader) read(dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := r.f.ReadAt(dest, off)
	if err != nil && err != io.EOF {
		return nil, errno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (r *storeReader) close() {
	if r != nil {
		r.f.Close()
	}
}

// roNode is a file the mount only reads: latest.md, created_at,
// updated_at, AGENTS.md, SKILLS.md and everything archived. Its mode loses
// the write bits, so the kernel answers EACCES to other writers; root,
// which the kernel lets through, gets EPERM here.
type roNode struct {
	storeNode
}

var (
	_ = (fs.NodeOpener)((*roNode)(nil))
	_ = (fs.NodeReader)((*roNode)(nil))
	_ = (fs.NodeGetattrer)((*roNode)(nil))
	_ = (fs.NodeSetattrer)((*roNode)(nil))
)

// Getattr: the timestamps from the engine's memory, like values; the
// others from the store.
func (n *roNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if session.Memoized(n.place) {
		return n.valueAttr(out)
	}
	out.SetTimeout(cacheTimeout)
	return n.fileAttr(f, &out.Attr)
}

// Setattr: the engine allows only touching the times of live files.
func (n *roNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return n.setattr(ctx, in, out, n.Getattr)
}

// Open: created_at and updated_at are small values the engine serves from
// memory (openCopy: a copy taken at open). The other session files
// are replaced whole by the engine and may be megabytes: a copy taken at
// open, read with FOPEN_DIRECT_IO, so that no page of an older version is
// ever served; so is versions/index.jsonl, which grows. Archived files and
// the contents of versions/ (named by their hash) never change: their
// pages are kept. The engine verifies a versions file at each open (EIO).
// Handles count against the opener's quota of open files.
func (n *roNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if fh, fl, bad, ok := n.openEnded(ctx, flags); ok {
		return fh, fl, bad
	}
	if session.Memoized(n.place) && n.m.e.CheckOpen(n.place, int(flags)) == nil {
		if fh, fl, errno, ok := n.m.openCopy(ctx, flags, n.value); ok {
			return fh, fl, errno
		}
	}
	return n.m.opened(ctx, func() (fs.FileHandle, uint32, syscall.Errno) { return n.open(ctx, flags) })
}

func (n *roNode) open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if err := n.m.e.CheckOpen(n.place, int(flags)); err != nil {
		return nil, 0, errno(err)
	}
	if n.place.Kind == layout.PlaceReadOnly || n.place.File == layout.VersionsIndex {
		// The engine rewrites these files in place of a spare twin
		// (replaceValue): a descriptor held across two replacements
		// could see the twin rewritten. A copy taken at open is one
		// value, whole, for as long as the file stays open.
		var b []byte
		var err error
		if session.Memoized(n.place) {
			b, err = n.value()
		} else {
			b, err = n.m.e.ReadFile(n.rel, maxSnapshot)
		}
		if err != nil {
			return nil, 0, errno(err)
		}
		// Each open holds one, up to maxSnapshot (heldCopy).
		c, bad := n.m.holdCopy(ctx, b)
		if bad != 0 {
			return nil, 0, bad
		}
		return &roHandle{snapshot: c}, fuse.FOPEN_DIRECT_IO, 0
	}
	r, errno := n.m.openReader(ctx, n.rel)
	if errno != 0 {
		return nil, 0, errno
	}
	return &roHandle{r: r}, fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_NOFLUSH, 0
}

// Read: see readNow.
func (n *roNode) Read(ctx context.Context, f fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return readNow(ctx, f, n.value, dest, off)
}

// maxSnapshot bounds the copy of a read-only session file taken at open
// (latest.md holds one message of at most 1 MiB; AGENTS.md is bounded by
// the engine).
const maxSnapshot = 8 << 20

// roHandle reads a read-only file: from a copy taken at open (session
// files) or from the store file (archived files, which never change).
type roHandle struct {
	held
	r        *storeReader
	snapshot heldCopy // a copy taken at open (roNode.open, openCopy)
}

var (
	_ = (fs.FileReader)((*roHandle)(nil))
	_ = (fs.FileReleaser)((*roHandle)(nil))
)

// reader is the store file the handle reads (nil for a copy): fileAttr.
func (h *roHandle) reader() *storeReader { return h.r }

func (h *roHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if h.r == nil {
		return readAt(h.snapshot.data, dest, off), 0
	}
	return h.r.read(dest, off)
}

func (h *roHandle) Release(ctx context.Context) syscall.Errno {
	h.r.close()
	h.snapshot.drop()
	h.giveBack()
	return 0
}
