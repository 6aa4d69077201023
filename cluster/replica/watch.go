package replica

import (
	"container/list"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/layout"
)

// The writer tells its own mount of each change before it acknowledges
// it; a follower hears of nothing, so it looks. The files and directories
// its users looked up, listed or opened lately are looked at again every
// pollEvery, and each whose inode, size or times moved (or that came or
// went) is announced, as the writer announces its changes: the projection
// marks the kernel's attributes stale and moves the file's stamp, so the
// next stat sees the new size, the kernel drops pages of the old content
// itself, and a `tail -f` reads the new lines within a second. A session
// directory gone (archived on the writer) is announced too: the
// projection then drops its names (fs/notify.go).
//
// The set is bounded (watchedMax, least recently used out). What falls
// out is announced once as it goes: the kernel then asks again at its
// next look, which brings it back into the set. So the kernel never keeps
// an attribute of the store's that nobody watches.

const (
	pollEvery  = 200 * time.Millisecond
	watchedMax = 4096
)

// watcher polls what was seen lately.
type watcher struct {
	root     *storefs.Root
	announce func(rel string)

	mu      sync.Mutex
	byRel   map[string]*list.Element // of *watched
	lru     *list.List               // most recently seen at the front
	dropped []string                 // out of the set, to be announced once
	done    chan struct{}
	stopped sync.Once
}

// watched is one path and what it was when last looked at.
type watched struct {
	rel string
	id  fileID // zero: missing
}

func newWatcher(root *storefs.Root, announce func(rel string)) *watcher {
	return &watcher{root: root, announce: announce, byRel: map[string]*list.Element{}, lru: list.New(), done: make(chan struct{})}
}

// seen records that rel was just looked at and found as st (nil:
// missing), by a caller whose answer gives the kernel these attributes
// (a lookup, a stat, a value): what changes after it is announced. The
// free trees are left out (their attributes are kept a second only:
// fs/node.go).
func (w *watcher) seen(rel string, st *unix.Stat_t) { w.note(rel, st, true) }

// opened records that rel was just opened, found as st: watched from now
// on, but what the kernel holds of it is what it was last given, so a
// change it missed is still announced.
func (w *watcher) opened(rel string, st *unix.Stat_t) { w.note(rel, st, false) }

func (w *watcher) note(rel string, st *unix.Stat_t, gave bool) {
	if layout.FreeTree(rel) || !layout.Classify(rel).Exists() {
		return
	}
	id := idOf(st)
	w.mu.Lock()
	defer w.mu.Unlock()
	if el, ok := w.byRel[rel]; ok {
		if gave {
			el.Value.(*watched).id = id
		}
		w.lru.MoveToFront(el)
		return
	}
	w.byRel[rel] = w.lru.PushFront(&watched{rel: rel, id: id})
	for w.lru.Len() > watchedMax {
		old := w.lru.Remove(w.lru.Back()).(*watched)
		delete(w.byRel, old.rel)
		w.dropped = append(w.dropped, old.rel)
	}
}

// run polls until stop.
func (w *watcher) run() {
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-t.C:
		}
		for _, rel := range w.poll() {
			w.announce(rel)
		}
	}
}

func (w *watcher) stop() { w.stopped.Do(func() { close(w.done) }) }

// poll looks at every watched path once and returns those that changed,
// and those that fell out of the set since the last poll.
func (w *watcher) poll() []string {
	w.mu.Lock()
	items := make([]watched, 0, w.lru.Len())
	for el := w.lru.Front(); el != nil; el = el.Next() {
		items = append(items, *el.Value.(*watched))
	}
	changed := w.dropped
	w.dropped = nil
	w.mu.Unlock()
	for _, it := range items {
		st, err := w.root.Lstat(it.rel)
		if err != nil {
			st = nil
		}
		if id := idOf(st); id != it.id && w.moved(it.rel, it.id, id) {
			changed = append(changed, it.rel)
		}
	}
	return changed
}

// moved records rel's new id unless someone recorded a newer look
// meanwhile; it says whether rel changed since it was last recorded.
func (w *watcher) moved(rel string, was, now fileID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	el, ok := w.byRel[rel]
	if !ok {
		return false // fell out meanwhile: announced as it fell (dropped)
	}
	it := el.Value.(*watched)
	if it.id != was {
		return it.id != now // looked at meanwhile: changed only if that look was older
	}
	it.id = now
	return true
}
