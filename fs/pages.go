package fs

import (
	"sync"
	"sync/atomic"
	"syscall"
)

// The page a log's end was read into.
//
// A READ that reaches a log's end gets fewer bytes than it asked for, and
// the kernel fills the rest of that page with zeros and keeps it. When the
// kernel later learns a larger size of the file (the reply to a GETATTR, a
// LOOKUP, a READDIRPLUS entry, or to an append through the mount), it sets
// the new size first and drops the pages after: fuse_change_attributes
// writes i_size, then invalidate_inode_pages2 walks every page of the
// file, the end's last; the reply to an append drops none. A reader in
// between is served the zeros as the log's new bytes, and so is one whose
// READ was answered before an append and delivered after the kernel took
// the new size. `tail -f` printed NULs where a line had been appended
// (TestExactReadsProperty in CI; TestTailNoZeros makes it within seconds).
//
// So the kernel is never told a larger size of a log while it may hold a
// page read up to an end it was told before: first the pages from the one
// that held the end told last are dropped (NotifyContent from its offset,
// which waits for a READ of them in flight and marks the attributes stale
// too). A READ answered after that reads the store at the new size at
// least. Nothing is dropped when no READ began since the last drop
// finished (a writer with no reader: the appends through one descriptor).
//
// A reply that tells a size waits for a drop under way (tell takes the
// lock whenever a READ began since the last drop finished). The kernel
// marks the attributes stale before it drops the pages, and the drop
// waits for each page under a READ: a GETATTR answered meanwhile gave the
// kernel the new size while the old end's page was still in its cache,
// to be copied, zeros and all, by any reader. Until 2026-12-05 a drop's
// mark was cleared as it began, and such a reply did not wait:
// TestTailNoZeros printed zeros twice in CI in two days
// (TestTellWaitsForDrop).
//
// What the drop cannot close: a read(2) takes its page from the cache
// first and reads the size after (filemap_read), without a lock either
// side holds. A reader that took the end's page before the drop and reads
// the size after another process's GETATTR brought the new one still
// copies the page's zeros: both the drop and a whole GETATTR must fall
// between two steps of one read(2) (or the drop and the reply to an
// append through the mount, which sets the size too). TestEndReadsNoZeros
// makes it: readers spinning at the end were given zeros in 5 of 21 runs
// of 15 s. Only readers with no page cache (direct I/O: warm reads at
// about a tenth of native) or the kernel reading the store file itself
// (passthrough, which refuses writers' opens while a reader holds the
// log) would close it. Storing the new bytes into the cache instead of
// dropping the pages (FUSE_NOTIFY_STORE, *fs.Inode's WriteCache) does
// not: the kernel sets the size before it copies the bytes into the page,
// two steps of its own that a reader spinning at the end falls between
// far more often (10 of 13 runs; docs/benchmarks.md#pages-of-a-logs-end).
//
// Where it is done: for an engine's append, by Mounts.announced, before
// the append is acknowledged; for an append through the mount, by its
// WRITE handler, before the kernel has the reply; and by every reply that
// reports a log's size (Getattr, attach), for an append not announced
// yet. The drop bumps the kernel's attribute version, so that reply's
// attributes are not kept (the kernel asks again at its next look): the
// append it saw is not acknowledged yet, and the look sees the log as it
// was before.

// ends is what an identity of a log keeps of its ends.
type ends struct {
	mu sync.Mutex
	// told is an end the kernel was told before every page read since the
	// last drop; it may lag behind the true one (a drop from an earlier
	// offset drops more, no less).
	told int64
	// reads counts the READs begun (each before it reads the store): a
	// page read up to an end may be in the kernel's cache.
	reads atomic.Uint64
	// dropped is the count of READs begun before the last drop that has
	// finished: their pages are gone from the cache. It moves only when
	// the drop is done, so that a reply telling a size meanwhile waits.
	dropped atomic.Uint64
}

// pageDropper is what tell needs of a log's inode: *fs.Inode's
// invalidation of the kernel's pages from an offset on (and of the
// attributes), which returns once the kernel has dropped them.
type pageDropper interface {
	NotifyContent(off, sz int64) syscall.Errno
}

// reading is called by a READ of a log before it reads the store.
func (e *ends) reading() { e.reads.Add(1) }

// tell is called before the kernel is told that the log of node is size
// bytes long (size is called only when pages may need a drop). It
// reports whether it dropped pages (and so marked the attributes stale).
// It returns only when no drop is under way that the kernel's cache
// needs before it learns the size.
func (e *ends) tell(node pageDropper, size func() (int64, bool)) bool {
	if e.reads.Load() == e.dropped.Load() {
		return false // no READ since the last drop finished
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	reads := e.reads.Load()
	if reads == e.dropped.Load() {
		return false // dropped while this waited
	}
	end, ok := size()
	if !ok || end <= e.told {
		return false // every page read since the last drop ends past it
	}
	node.NotifyContent(e.told&^(pageSize-1), 0)
	e.told = end
	e.dropped.Store(reads)
	return true
}
