package fs

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hanwen/go-fuse/v2/fs"

	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/layout"
)

// Keeping the kernel's caches exact.
//
// The kernel keeps the ABI's names and attributes for cacheTimeout and
// a log's pages across opens (node.go). Every change the server makes
// reaches changed before anyone hears of it: the engine calls it
// synchronously (Engine.OnChange) right after each change, before the
// change is acknowledged (a frame sent, a system call answered), and the
// handlers call it after their own. changed does only what cannot wait
// on a handler:
//
//   - the file's stamp moves, and with it the mtime it reports (node.go);
//     so does the stamp of an index directory, whose listing is the
//     index's memory, not the store's;
//   - the kernel's attributes of the node and of its directory are marked
//     stale: NotifyContent(-1, 0), an invalidation of attributes alone,
//     which does not wait for a READ of the inode in flight nor deadlock
//     inside a WRITE handler of it (docs/benchmarks.md#attribute-invalidation);
//   - for a log some READ may have cached the end of, the pages from that
//     end are dropped instead, which marks the attributes stale too
//     (pages.go). That waits for a READ of those pages in flight, which
//     another of go-fuse's goroutines answers without a lock of ours.
//
// The next stat or read then asks the server, so sizes are exact at once;
// when the size or mtime it gets differs from what the kernel cached, the
// kernel drops the file's cached pages itself before serving a read
// (FUSE_AUTO_INVAL_DATA, which go-fuse negotiates), and a cached listing
// when the directory's mtime moved. Old pages stay served after an
// attributes-only invalidation when neither size nor mtime moved: hence
// the stamps (docs/benchmarks.md#attribute-invalidation). Values are read
// from a copy taken at open, never through the page cache (openCopy).
//
// A server killed while a drop waits for a READ cannot end until its
// connection is aborted: the watchdog of a root server does that
// (cmd/ctxfs/watchdog.go).
// Names that went are invalidated by the notifier goroutine, never waited
// for: NotifyEntry takes the directory's lock, which a handler working in
// that directory holds. Until it lands, the name's attributes are stale
// already, so a stat through it asks the server and learns it is gone.

// changed makes the kernel's caches of rel (a file or directory, as the
// store and the tree name it) exact at once, and queues the invalidation
// of its name if it may have gone. It waits for nothing a handler or the
// engine's locks hold: it is safe inside handlers and with those locks
// held.
func (ms *Mounts) changed(rel string) { ms.announced(rel, session.Changed) }

// announced is changed for a change the engine describes (Engine.OnChange).
//
// A log only grows, in place: its directory is as it was (the store
// directory's mtime moves only when names come or go), so only the log's
// own attributes go stale. And lines a writer appended through the mount
// (session.Written) need no notification at all: the kernel that sent the
// WRITE marks the file's size, mtime, ctime and blocks stale itself once
// it is answered (fuse_write_update_attr), and the mode, owner and group
// that an append leaves alone stay cached, so the writer's next open
// sends no GETATTR for its permission check (an attributes notification
// marks them all stale). Notifying at every append was a quarter of the
// server's CPU per append (docs/benchmarks.md#appends-notify-nothing).
// integration/fuse_cache_test.go checks that a reader that had the log
// cached sees the new size and bytes when the write returns. The handler
// of that WRITE moves the log's stamp itself (logHandle.appendLines): it
// holds the node, which the walk to it (find) and the classification of
// its path cost again at every append
// (docs/benchmarks.md#appends-through-one-descriptor).
func (ms *Mounts) announced(rel string, how session.Change) {
	ms.gen.Add(1) // before looking: see mountState.attach
	if how == session.Written {
		return
	}
	parent, node, _ := ms.find(rel)
	if how == session.Touched {
		unstamp(node) // times set as given: shown as the store holds them
		staleAttrs(node)
		return
	}
	pl := layout.Classify(rel)
	if pl.Kind == layout.PlaceLog {
		stamp(node)
		if ln, ok := operations(node).(*logNode); !ok || !ln.grown() {
			staleAttrs(node)
		}
		return
	}
	if listedFromMemory(parent) {
		stamp(parent) // a name may have come or gone: the listing goes
	}
	if pl.Kind != layout.PlaceIndex {
		// The index directory is announced when what it lists changes
		// (every append touches the session's place in the list); it
		// is made when its index loads, which announces the container.
		// Marking the container stale at each append cost every `echo
		// >>` a GETATTR of it (default_permissions checks the search
		// permission of each directory walked).
		staleAttrs(parent)
	}
	stamp(node)
	staleAttrs(node)
	switch pl.Kind {
	case layout.PlaceSession:
		// Its nodes stand for it no more once it left the path, whether
		// the kernel holds them there or not (an archive through the
		// mount moved the directory's node: life.go).
		ms.sessionGone(rel, pl)
		if node != nil && ms.e.Gone(rel) {
			// Archived or deleted: its names go with the notifier, and a
			// reader walking them meanwhile (or a session made anew under
			// the same name) must not be served what they held.
			for _, ch := range node.Children() {
				stamp(ch)
				staleAttrs(ch)
			}
		}
		fallthrough
	case layout.PlaceIndexCurrent, layout.PlaceIndexEntry:
		if node != nil {
			ms.pending.add(pendingOp{rel: rel}) // names that may go
		}
	}
}

// operations is n's node object (nil for no node).
func operations(n *fs.Inode) fs.InodeEmbedder {
	if n == nil {
		return nil
	}
	return n.Operations()
}

// listedFromMemory reports whether the engine lists the directory n from
// its memory (session.Promises.ListedFromMemory): its store mtime does
// not move when a name comes or goes; its stamp does.
func listedFromMemory(n *fs.Inode) bool {
	if n == nil {
		return false
	}
	d, ok := n.Operations().(*dirNode)
	return ok && d.promised().ListedFromMemory
}

// stamp moves n's change stamp (for nodes that carry one).
func stamp(n *fs.Inode) {
	if n == nil {
		return
	}
	if s, ok := n.Operations().(stamped); ok {
		s.changeStamp().Store(nextStamp())
	}
}

// unstamp drops n's change stamp: its times are shown as the store holds
// them (session.Touched).
func unstamp(n *fs.Inode) {
	if n == nil {
		return
	}
	if s, ok := n.Operations().(stamped); ok {
		s.changeStamp().Store(0)
	}
}

// staleAttrs marks the kernel's attributes of n stale (nothing when the
// kernel does not know n, or holds none of them from us since they were
// last marked stale: tracked).
func staleAttrs(n *fs.Inode) {
	if n == nil {
		return
	}
	if t, ok := n.Operations().(attrsTracker); ok && !t.given().Swap(false) {
		return
	}
	n.NotifyContent(-1, 0)
}

// tracked is carried by the nodes (directories and logs) that know
// whether the kernel may hold attributes they gave it since they were
// last marked stale: a notification then goes only to attributes that
// may be cached. A stream of appends with no stat in between (a writer
// through the mount, an agent's sends) marked the same attributes stale
// at every append, with a notification each, a write to /dev/fuse
// (docs/benchmarks.md#appends-notify-nothing).
//
// Sound because every attribute the kernel caches comes in a reply of
// ours, and each such reply of a tracked node sets the flag before it
// reads what it reports: Getattr (also behind SETATTR, LOOKUP of "."
// and the lookups go-fuse makes itself) and attach (LOOKUP, READDIRPLUS,
// MKDIR, CREATE). A change then either happened before that read (the
// reply has it) or finds the flag set and notifies; a notification that
// crosses the reply in the kernel wins (the kernel keeps no reply older
// than the last invalidation: attr_version). STATX is not implemented,
// so the kernel asks GETATTR. The flag is the inode's, not the node
// object's (identity.go): a reply may be filled by a node go-fuse then
// drops for the one it already holds, which is the one changes find.
type tracked struct{}

func (tracked) tracksAttrs() {}

type attrsTracker interface {
	tracksAttrs()
	given() *atomic.Bool
}

// find walks the nodes the kernel knows towards rel: node is rel's (nil
// when the kernel does not know it), parent its directory's (nil when the
// kernel does not know that either, or for a mount root), name its last
// component.
func (ms *Mounts) find(rel string) (parent, node *fs.Inode, name string) {
	first, rest, more := strings.Cut(strings.Trim(rel, "/"), "/")
	node = ms.roots[first]
	for more {
		name, rest, more = strings.Cut(rest, "/")
		if node == nil {
			return nil, nil, name
		}
		parent, node = node, node.GetChild(name)
	}
	return parent, node, name
}

// forget queues a name whose kernel dentry must go although the store
// holds it: a session directory renamed into the archive keeps, in the
// kernel, the node made for its live place (its path, its kind); the next
// lookup of the name makes the right one.
func (ms *Mounts) forget(rel string) { ms.pending.add(pendingOp{rel: rel, forget: true}) }

// notifier sends the kernel the invalidations that may wait, from its own
// goroutine.
func (ms *Mounts) notifier() {
	for {
		select {
		case <-ms.done:
			return
		case <-ms.pending.wake:
		}
		for _, op := range ms.pending.take() {
			select {
			case <-ms.done:
				return
			default:
			}
			if op.forget {
				ms.forgetEntry(op.rel)
			} else {
				ms.invalidate(op.rel)
			}
		}
	}
}

// invalidate drops rel's name from the kernel's cache if the tree no
// longer holds it.
func (ms *Mounts) invalidate(rel string) {
	parent, node, name := ms.find(rel)
	if node != nil && parent != nil && ms.e.Gone(rel) {
		parent.NotifyEntry(name)
	}
}

// forgetEntry drops the kernel's dentry for rel. Sent from the notifier
// goroutine, it waits in the kernel until the rename that moved the name
// has released its directories, and so lands after the move.
func (ms *Mounts) forgetEntry(rel string) {
	if parent, _, name := ms.find(rel); parent != nil {
		parent.NotifyEntry(name)
	}
}

// pendingOp is one invalidation for the notifier.
type pendingOp struct {
	rel    string
	forget bool // forgetEntry, else invalidate
}

// pending is the notifier's queue: in order, each operation once, so it
// is bounded by the names changed meanwhile and never drops one.
type pending struct {
	mu   sync.Mutex
	ops  []pendingOp
	has  map[pendingOp]bool
	wake chan struct{} // holds a wake-up when ops is not empty
}

func newPending() *pending {
	return &pending{has: map[pendingOp]bool{}, wake: make(chan struct{}, 1)}
}

func (p *pending) add(op pendingOp) {
	p.mu.Lock()
	if !p.has[op] {
		p.has[op] = true
		p.ops = append(p.ops, op)
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take returns what is queued and empties the queue.
func (p *pending) take() []pendingOp {
	p.mu.Lock()
	defer p.mu.Unlock()
	ops := p.ops
	p.ops = nil
	clear(p.has)
	return ops
}
