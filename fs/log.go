package fs

import (
	"bytes"
	"context"
	"hash/maphash"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/layout"
)

// logNode is messages.jsonl or events.jsonl (SPEC 6): read straight from
// the store; written only by appending whole lines through the engine.
type logNode struct {
	storeNode
	tracked // notify.go
}

var (
	_ = (fs.NodeOpener)((*logNode)(nil))
	_ = (fs.NodeGetattrer)((*logNode)(nil))
	_ = (fs.NodeSetattrer)((*logNode)(nil))
)

// Getattr reports the store file's exact size. The kernel keeps it until
// the next append, which the engine announces (changed) before it is
// acknowledged; without the cache every read(2) of a warm log waited for
// a GETATTR (see cacheTimeout for the figures).
func (n *logNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.gave() // before the stat: see tracked
	out.SetTimeout(cacheTimeout)
	if errno := n.fileAttr(f, &out.Attr); errno != 0 {
		return errno
	}
	n.telling(int64(out.Attr.Size))
	return 0
}

// telling is called before a reply tells the kernel the log is size
// bytes long (pages.go).
func (n *logNode) telling(size int64) {
	n.id.ends.tell(n.EmbeddedInode(), func() (int64, bool) { return size, true })
}

// grown is called after an append, before the kernel learns of it; it
// reports whether it marked the attributes stale (pages.go).
func (n *logNode) grown() bool {
	return n.id.ends.tell(n.EmbeddedInode(), func() (int64, bool) {
		st, err := n.m.e.Stat(n.rel)
		if err != nil {
			return 0, false
		}
		return st.Size, true
	})
}

// Setattr: logs only grow; the engine refuses any size change.
func (n *logNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return n.setattr(ctx, in, out, n.Getattr)
}

// Open: the engine says who may open (a writer appends, never truncates). The page
// cache stays on for readers (large logs, tail -f); after every append the
// kernel sees a new size and mtime and drops it itself (see open).
// Open counts the handle against the opener's quota of open files.
func (n *logNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return n.openCounted(ctx, flags, n.open)
}

func (n *logNode) open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if err := n.m.e.CheckOpen(n.place, int(flags)); err != nil {
		return nil, 0, errno(err)
	}
	h := &logHandle{node: n}
	if isRead(flags) {
		r, errno := n.m.openReader(ctx, n.rel)
		if errno != 0 {
			return nil, 0, errno
		}
		h.r = r
	}
	if isWrite(flags) {
		// RELEASE carries no caller: the writer is the one who opened.
		// Its pid and groups are read from /proc only when a loss must
		// name them (writerOf): that read was three system calls of
		// every `echo >>`, and so is a store descriptor a write-only
		// handle never reads through.
		h.opener, _ = fuse.FromContext(ctx)
		h.buffered = newBuffered(n.m, callerUid(ctx))
		// A writer's bytes never enter the page cache: the kernel
		// refuses a shared mapping of a FOPEN_DIRECT_IO handle (ENODEV;
		// go-fuse does not offer FUSE_DIRECT_IO_ALLOW_MMAP), and its
		// writes go to the server alone. Through a writable shared
		// mapping readers saw bytes the server later refused, and a
		// dirty page that stayed valid JSON was appended again at its
		// writeback; and the lines the engine stores carry the writer's
		// uid (session.Engine.AppendLog), so what was written is not
		// what a reader must see. A write(2) also reaches the server in
		// one WRITE up to maxWrite, where the page cache's path cut it
		// at page boundaries.
		return h, fuse.FOPEN_DIRECT_IO, 0
	}
	// Readers keep the page cache across opens: a log only grows, and
	// every append marks the kernel's attributes stale before it is
	// acknowledged (notify.go), so the next look sees the new size and
	// the kernel drops the stale pages itself. A writer's open drops the
	// cache. Without this every read of a large log went to the server
	// (docs/benchmarks.md#log-page-cache). A reader's
	// close has nothing to flush (FOPEN_NOFLUSH: no FLUSH round trip).
	return h, fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_NOFLUSH, 0
}

// logHandle buffers one writer's unfinished line, so that a line that
// arrives in several writes is appended whole and two writers never
// interleave inside a line.
type logHandle struct {
	held
	node *logNode
	r    *storeReader // nil for a write-only handle
	// opener is who opened a writer (uid, gid, thread); caller is it
	// resolved through /proc (writerOf), once a loss must be recorded.
	opener   *fuse.Caller
	caller   layout.Caller
	resolved bool

	mu sync.Mutex
	// partial is the bytes after the last newline written so far. It
	// grows by append (amortised linear in the line's length) and is
	// counted in buffered, the writer's share of quota.Limits.Partial.
	partial  []byte
	buffered buffered
	// failed is the errno of a line refused since the last close, which
	// the next close reports: when the kernel cut one write(2) into two
	// FUSE writes and only the second was refused, write(2) returned a
	// short count as if all were well, and only the close can say.
	failed syscall.Errno
	// refused is the last refused write: a writer retrying it after a
	// short count is refused again without a second record.
	refused refusal
	// unsynced: lines were appended since the last fsync or close, and are
	// durable only once the engine says so (SPEC 6).
	unsynced bool
	// refusing: a line grew over the limit and was refused; the rest of
	// it, up to its newline, is refused too. (The kernel cuts a large
	// write into pieces and the writer retries what was not taken: the
	// tail of a refused line must not start a new one.)
	refusing bool
}

var (
	_ = (fs.FileReader)((*logHandle)(nil))
	_ = (fs.FileWriter)((*logHandle)(nil))
	_ = (fs.FileFlusher)((*logHandle)(nil))
	_ = (fs.FileFsyncer)((*logHandle)(nil))
	_ = (fs.FileReleaser)((*logHandle)(nil))
)

// reader is the store file the handle reads (nil for a writer): fileAttr.
func (h *logHandle) reader() *storeReader { return h.r }

func (h *logHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if h.r == nil {
		return nil, syscall.EBADF // the kernel refuses reads of a write-only descriptor first
	}
	h.node.id.ends.reading()
	return h.r.read(dest, off)
}

// Write appends the complete lines among what was written so far. The
// offset is ignored: the kernel computes it from a size that goes stale
// when the engine appends, and the engine appends at the real end. A
// refused write keeps nothing of its bytes, nor of the line they ended.
//
// Only the new bytes are looked at for a newline, and a line's bytes are
// copied once as they arrive and validated once, by the engine, when it
// is complete: a long line in small writes was quadratic before
// (docs/benchmarks.md#log-writes-in-small-pieces).
func (h *logHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if bad := h.node.ended(); bad != 0 {
		// Its session is gone from the log's path (archived: read only;
		// deleted): no line goes to a session made anew there.
		h.dropPartial()
		return 0, bad
	}
	if h.refusing {
		h.refusing = bytes.IndexByte(data, '\n') < 0
		return 0, syscall.EINVAL
	}
	if h.refused.of(data) {
		return 0, h.refused.errno // a retry of what was just refused (and recorded)
	}
	cut := bytes.LastIndexByte(data, '\n') + 1 // data[:cut] ends the complete lines
	pending := len(data) - cut                 // what stays unfinished after this write
	if cut == 0 {
		pending += len(h.partial)
	}
	if pending > abi.MaxLineBytes {
		// The line can never be valid: refuse it now, not at 1 GiB, and
		// drop it whole (nothing of it is pending at close).
		h.refusing = true
		return 0, h.refuse(data, len(h.partial)+len(data), session.Lost{Errno: syscall.EINVAL, Why: "a line over the 1 MiB limit was refused"})
	}
	if pending > h.buffered.n {
		// Over the writer's share: nothing of this write is taken (and
		// no line of it appended), and the pending line stays as it was.
		if err := h.buffered.keep(pending); err != nil {
			return 0, errno(err)
		}
	}
	if cut > 0 {
		lost := len(h.partial) + cut // what a refusal loses: the pending line and the lines ended here
		if err := h.appendLines(ctx, data[:cut]); err != nil {
			return 0, h.refuse(data, lost, session.Lost{Errno: errno(err), Why: "lines written were refused: " + err.Error()})
		}
		h.partial = h.partial[:0]
		if cap(h.partial) > maxKeptCap {
			h.partial = nil // a long line's buffer is not held for the next
		}
	}
	h.partial, h.refused = append(h.partial, data[cut:]...), refusal{}
	h.buffered.keep(len(h.partial)) // gives back what was committed
	if len(h.partial) > 0 {
		h.writerOf() // while the writer is surely alive: RELEASE may record the loss
	}
	return uint32(len(data)), 0
}

// maxKeptCap is the largest line buffer a handle keeps between lines, for
// the next line written in pieces: a page. What is kept between lines is
// not counted against the writer's share (only a pending line's bytes
// are), so it must stay in the order of what any open descriptor costs;
// 64 KiB let a uid's 1,024 descriptors keep 64 MiB uncounted.
const maxKeptCap = 4 << 10

// appendLines has the engine append the pending line, ended by lines (the
// complete lines of one write). Caller holds h.mu.
func (h *logHandle) appendLines(ctx context.Context, lines []byte) error {
	if len(h.partial) > 0 {
		lines = append(h.partial, lines...)
		h.partial = lines // the grown buffer, for reuse
	}
	n := h.node
	if err := n.m.e.AppendLog(h.opened(), n.place.Ref(), n.place.File, lines); err != nil {
		return err
	}
	// The engine announced the append as Written, which the mount leaves
	// to this handler (Mounts.announced): the log's stamp moves here, and
	// the kernel marks the attributes stale when this WRITE is answered.
	// A WRITE with no process behind it would be the page cache's
	// writeback of a shared mapping (none can be made while writers are
	// direct I/O: open), after which the kernel leaves the size cached:
	// announced in full.
	n.changeStamp().Store(nextStamp())
	n.grown() // before the reply gives the kernel the new size
	if fc, ok := fuse.FromContext(ctx); !ok || fc.Pid == 0 {
		n.m.changed(n.rel)
	}
	h.unsynced = true
	return nil
}

// opened is the opener's uid, gid and thread id, without the /proc read
// of writerOf: what an append needs. Reading /proc/PID/status at the
// first write of every descriptor was about a fifth of the server's CPU
// in BenchmarkAppend/open-close (`echo >>`). Caller holds h.mu.
func (h *logHandle) opened() layout.Caller {
	if h.resolved || h.opener == nil {
		return h.caller
	}
	return layout.Caller{Uid: h.opener.Uid, Gid: h.opener.Gid, Pid: int(h.opener.Pid)}
}

// writerOf is the writer as a loss records it: the opener's uid and gid,
// and the pid and groups of the thread that opened, read from /proc the
// first time they are needed (a thread already gone keeps its id as the
// pid). Caller holds h.mu.
func (h *logHandle) writerOf() layout.Caller {
	if !h.resolved && h.opener != nil {
		h.caller = h.opened()
		h.caller.Pid, h.caller.Groups = layout.ProcStatus(int(h.opener.Pid), h.opener.Uid, h.opener.Gid)
		h.resolved = true
	}
	return h.caller
}

// refuse drops the pending line and the refused data and has the engine
// record the loss of n bytes. When the refused line began in an earlier
// write, whose bytes were taken (that write returned success, perhaps as
// the first half of one write(2) the kernel cut in two), the next close
// reports the errno too: the writer may not have seen it otherwise.
func (h *logHandle) refuse(data []byte, n int, lost session.Lost) syscall.Errno {
	if len(h.partial) > 0 {
		h.failed = lost.Errno
	}
	h.dropPartial()
	h.refused = refusalOf(data, lost.Errno)
	h.node.m.e.RecordLoss(h.writerOf(), h.node.place.Ref(), h.node.place.File, n, lost)
	h.node.dropCachedEnd()
	return lost.Errno
}

// refusal is what a handle keeps of a refused write to know its retry:
// its length and a hash of its bytes, and its errno. Not the bytes: a
// user's descriptors each kept up to 1 MiB of them for as long as they
// stayed open, outside the share of unfinished bytes (300 descriptors of
// one uid held 500 MiB of the server). The hash is seeded at random
// once per server, so no writer can make another write pass for its
// retry; the zero value matches nothing.
type refusal struct {
	n     int
	sum   uint64
	errno syscall.Errno
}

var refusalSeed = maphash.MakeSeed()

func refusalOf(data []byte, errno syscall.Errno) refusal {
	return refusal{n: len(data), sum: maphash.Bytes(refusalSeed, data), errno: errno}
}

// of reports whether data is the refused write again.
func (r refusal) of(data []byte) bool {
	return r.errno != 0 && r.n == len(data) && r.sum == maphash.Bytes(refusalSeed, data)
}

// dropPartial forgets the pending line and gives back its bytes. Caller
// holds h.mu.
func (h *logHandle) dropPartial() {
	h.partial = nil
	h.buffered.keep(0)
}

// dropCachedEnd has the kernel drop its cached pages of the log from the
// page that holds its end, so that no reader is served bytes the server
// refused. A writer's bytes never reach the page cache (open: direct I/O
// for writers), so this is a second line, for whatever else could put
// them there: it costs a refusal one store stat and one notification,
// and readers keep every page before the end. Sent from a goroutine of
// its own: an invalidation of pages waits for any READ that holds one,
// and a refusal need not wait for that. (GO-FUSE-NOTES has it deadlock
// inside a WRITE handler: so it does for a writer through the page
// cache, whose pages the kernel holds locked meanwhile; a log's writers
// are direct I/O, for which the kernel holds the inode's lock, not its
// pages', and grown drops pages inside the handler: pages.go.)
func (n *logNode) dropCachedEnd() {
	var a fuse.Attr
	if n.statAttr(&a) != 0 {
		return
	}
	end := int64(a.Size) &^ (pageSize - 1) // node.go: the kernel's page
	go n.NotifyContent(end, 0)
}

// Flush is one close(2) of one descriptor: a line refused since the last
// close fails it with that line's errno, once; an unfinished line fails it
// with EINVAL (SPEC 6), and stays pending, since other descriptors of the
// same open file may still finish it.
func (h *logHandle) Flush(ctx context.Context) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if failed := h.failed; failed != 0 {
		h.failed = 0
		return failed
	}
	if len(h.partial) > 0 {
		return syscall.EINVAL
	}
	return h.syncLocked()
}

// Fsync (fsync, fdatasync) returns once every line this handle appended
// is durable. Lines of other writers to the same log become durable with
// them: the journal makes durable everything queued before.
func (h *logHandle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.syncLocked()
}

// syncLocked waits for the engine to make the handle's appends durable.
// Concurrent writers' syncs share the journal's commits.
func (h *logHandle) syncLocked() syscall.Errno {
	if !h.unsynced {
		return 0
	}
	if h.node.ended() != 0 {
		// The archive sealed the lines before it moved them (a delete
		// dropped them): none is left to make durable at the old path.
		h.unsynced = false
		return 0
	}
	if err := h.node.m.e.SyncLog(h.node.place.Ref(), h.node.place.File); err != nil {
		return errno(err)
	}
	h.unsynced = false
	return 0
}

// Release is the last close: an unfinished line is dropped, and the engine
// records that it was, so that the loss is never silent.
func (h *logHandle) Release(ctx context.Context) syscall.Errno {
	h.mu.Lock()
	n := len(h.partial)
	h.dropPartial()
	var who layout.Caller
	if n > 0 {
		who = h.writerOf()
	}
	h.mu.Unlock()
	if n > 0 && h.node.ended() == 0 { // not into a session made anew at the path
		h.node.m.e.RecordLoss(who, h.node.place.Ref(), h.node.place.File, n, session.LostPartial)
	}
	h.r.close()
	h.giveBack()
	return 0
}
