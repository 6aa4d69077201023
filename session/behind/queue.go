package behind

import (
	"container/list"
	"errors"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/storefs"
)

// Every is how often the queue writes what waits. A value is served from
// the queue at once and written behind: the values are derived from the
// logs, which are durable before anything is acknowledged, and loading a
// session derives state, latest.md and updated_at again, so a crash that
// loses a value waiting here loses nothing the logs do not hold (a
// snapshot is written again at the next run).
//
// Replacing them in the store at every send was a fifth of the server's
// CPU (docs/benchmarks.md#derived-values-written-behind); half a second
// keeps most of the saving and lets a second (the integration tests'
// settle) see the store settled.
const Every = 500 * time.Millisecond

// The bound of the failed values kept for sessions not loaded. A session
// leaves three (state, updated_at, latest.md; cwd and the snapshots when
// they changed too): a few bytes each but latest.md, one message (at most
// abi.MaxLineBytes), and the snapshots (AGENTS.md, up to a MiB a
// directory of the cwd). 4096 values, 16 MiB: the last values of more
// than a thousand sessions, or of sixteen with the largest latest.md, at
// about 17 MiB of memory at worst; each pass tries them all again (a
// failed write is a few system calls: 4096 of them take milliseconds).
// What is forgotten is derived again: state, latest.md and updated_at
// when the session loads, the snapshots at its next run, cwd at the next
// send that names another (until then the store's file says the
// previous one).
const (
	MaxLoose      = 4096
	MaxLooseBytes = 16 << 20
)

// Value is a derived value waiting for its store file: its bytes and the
// attributes the file will have once written. The engine serves it as its
// own session.Value (the same fields, converted): that type's promise
// (the attributes of the file the bytes were read from) is the engine's
// memo's, and the queue need not know the engine's public types.
type Value struct {
	Data []byte
	Stat unix.Stat_t
}

// Store is the engine's side: the only way the queue reaches the store
// and the engine's memory.
type Store interface {
	// Write replaces the store file rel with data, owned as own says,
	// with mtime as its times (the engine's replaceValue).
	Write(rel string, data []byte, own storefs.Owner, mtime *unix.Timespec) error
	// Hold runs fn with the session directory dir held: its loaded
	// session's files locked, or, not loaded, its cache key, so that no
	// load, archive, delete or newer value of it happens meanwhile.
	Hold(dir string, fn func())
	// Changed announces that what is served for each rel changed.
	Changed(rels ...string)
	// Written says that rel's store file now holds its value: the
	// store's own attributes are served from now on.
	Written(rel string)
}

// Queue holds the derived values not yet in the store, by session
// directory and file name.
//
// A value whose write failed is written again every Every until it
// holds: a derived file always ends consistent with the logs, not only
// when its session loads again. Meanwhile a value that failed for want of
// room (ENOSPC, EDQUOT, EMFILE, ENFILE, ENOMEM) is still served: it is
// what the logs say. One that failed otherwise (something planted where
// the file or its spare twin goes, an I/O error) is not: the store's file
// is served as it is, so the mount shows what fsck will name.
//
// A value keeps no session: only its bytes and the attributes its file
// gets. A session whose value failed leaves the cache like any other (it
// would else hold its descriptors beyond the cache's bound for as long as
// the disk is full), and the value is written later by its path, through
// Store.Write, with the session held (Store.Hold). The failed values of
// sessions not loaded ("loose") are bounded (MaxLoose, MaxLooseBytes):
// beyond, the oldest is forgotten, which loses nothing the logs do not
// hold, as a crash would (see Every).
type Queue struct {
	store Store
	log   *slog.Logger
	mu    sync.Mutex
	byDir map[string]map[string]*pending // by session directory, then file name
	// loose are the values of sessions not loaded, oldest first, and
	// looseBytes their size; at most maxLoose values and maxLooseBytes.
	loose                   *list.List
	looseBytes              int
	maxLoose, maxLooseBytes int
	stop                    chan struct{}
	done                    chan struct{}
	once                    sync.Once
}

// pending is the value one derived file must still get, with the
// attributes its store file will have.
type pending struct {
	dir    string // the session directory, the session's cache key
	name   string
	own    storefs.Owner // the file's owner and mode (Store.Write)
	v      Value
	failed bool          // its last write failed: written again at the next pass
	hidden bool          // failed, and not for want of room: not served
	loose  *list.Element // in Queue.loose while its session is not loaded
}

func (p *pending) rel() string { return p.dir + "/" + p.name }

// New makes an empty queue that writes through store and warns on log.
func New(store Store, log *slog.Logger) *Queue {
	return &Queue{store: store, log: log, byDir: map[string]map[string]*pending{},
		loose: list.New(), maxLoose: MaxLoose, maxLooseBytes: MaxLooseBytes,
		stop: make(chan struct{}), done: make(chan struct{})}
}

// Put makes v the value of the file name of the session directory dir,
// written to the store within Every (failed: the error of a write of it
// that failed just now; it is written again then). The caller holds dir's
// session files (as Store.Hold does), and announces the change after Put
// returns.
func (q *Queue) Put(dir, name string, own storefs.Owner, v Value, failed error) {
	p := &pending{dir: dir, name: name, own: own, v: v}
	q.mu.Lock()
	q.remove(p.rel())
	if q.byDir[dir] == nil {
		q.byDir[dir] = map[string]*pending{}
	}
	q.byDir[dir][name] = p
	q.setFailed(p, failed)
	q.mu.Unlock()
}

// setFailed records how p's last write ended (nil: it did not fail);
// caller holds mu.
func (q *Queue) setFailed(p *pending, err error) {
	p.failed = err != nil
	p.hidden = p.failed && !wantOfRoom(err)
}

// Value is the value waiting for rel, when one is served.
func (q *Queue) Value(rel string) (Value, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if p := q.lookup(rel); p != nil && !p.hidden {
		return p.v, true
	}
	return Value{}, false
}

// Drop forgets what waits for rel: a value written through the mount, or
// written now, supersedes it. The caller holds rel's session files.
func (q *Queue) Drop(rel string) {
	q.mu.Lock()
	q.remove(rel)
	q.mu.Unlock()
}

// lookup is the value waiting for rel, or nil; caller holds mu.
func (q *Queue) lookup(rel string) *pending {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return nil // not a file of a session
	}
	return q.byDir[rel[:i]][rel[i+1:]]
}

// remove forgets rel's value; caller holds mu.
func (q *Queue) remove(rel string) {
	p := q.lookup(rel)
	if p == nil {
		return
	}
	if delete(q.byDir[p.dir], p.name); len(q.byDir[p.dir]) == 0 {
		delete(q.byDir, p.dir)
	}
	q.unloose(p)
}

// unloose takes p out of the loose values; caller holds mu.
func (q *Queue) unloose(p *pending) {
	if p.loose != nil {
		q.loose.Remove(p.loose)
		q.looseBytes -= len(p.v.Data)
		p.loose = nil
	}
}

// Attach marks the values of the session directory dir as its loaded
// session's again (not loose): the session is loading. A loaded session
// never loses a value to the bound, which would leave its store file
// behind the logs until it loads again.
func (q *Queue) Attach(dir string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, p := range q.byDir[dir] {
		q.unloose(p)
	}
}

// Release marks the values still waiting for the session directory dir
// loose: its session left the cache (or did not load) with them, whose
// writes failed. The oldest loose values beyond the bound are forgotten:
// a session not loaded derives them again when it loads (see MaxLoose).
func (q *Queue) Release(dir string) {
	q.mu.Lock()
	for _, p := range q.byDir[dir] {
		if p.loose == nil {
			p.loose = q.loose.PushBack(p)
			q.looseBytes += len(p.v.Data)
		}
	}
	var forgotten []string
	for q.loose.Len() > q.maxLoose || q.looseBytes > q.maxLooseBytes {
		p := q.loose.Front().Value.(*pending)
		q.remove(p.rel())
		forgotten = append(forgotten, p.rel())
	}
	q.mu.Unlock()
	for _, rel := range forgotten {
		q.log.Warn("derived file not written for want of room; derived again from the logs when its session loads", "file", rel)
	}
	q.store.Changed(forgotten...) // the store's file is served again, as it is
}

// Forget drops every value waiting for the session directory dir, which
// is being archived or deleted: nothing is written into it after. The
// caller holds dir's cache key.
func (q *Queue) Forget(dir string) {
	q.mu.Lock()
	var rels []string
	for _, p := range q.byDir[dir] {
		rels = append(rels, p.rel())
	}
	for _, rel := range rels {
		q.remove(rel)
	}
	q.mu.Unlock()
	q.store.Changed(rels...)
}

// Waits reports whether a value of the session directory dir is still to
// be written.
func (q *Queue) Waits(dir string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.byDir[dir]) > 0
}

// Run writes what waits every Every, until Close.
func (q *Queue) Run() {
	defer close(q.done)
	t := time.NewTicker(Every)
	defer t.Stop()
	for {
		select {
		case <-q.stop:
			return
		case <-t.C:
			q.Flush("", true)
		}
	}
}

// Close stops Run and waits for it to return; what still waits stays
// (Flush writes it).
func (q *Queue) Close() {
	q.once.Do(func() { close(q.stop) })
	<-q.done
}

// Flush writes what waits: of the session directory only ("": of every
// session), and with failed also the values whose last write failed. It
// returns once they are in the store or have failed again. Each session
// is held meanwhile (Store.Hold), loaded or not; the caller must not hold
// a session (a load, a close, a take).
func (q *Queue) Flush(only string, failed bool) {
	q.mu.Lock()
	var dirs []string
	for dir := range q.byDir {
		if only == "" || dir == only {
			dirs = append(dirs, dir)
		}
	}
	q.mu.Unlock()
	for _, dir := range dirs {
		q.store.Hold(dir, func() { q.FlushDir(dir, failed) })
	}
}

// FlushRel writes the value waiting for rel, if one does, now. The
// caller must not hold its session.
func (q *Queue) FlushRel(rel string) {
	q.mu.Lock()
	p := q.lookup(rel)
	q.mu.Unlock()
	if p != nil {
		q.Flush(p.dir, true)
	}
}

// FlushDir writes the waiting values of the session directory dir (with
// failed, also those whose last write failed). The caller holds dir as
// Store.Hold does (an archive or a close holds it already), so that no
// newer value or user's write lands between a write and its removal
// here, and nothing else writes into the directory, moves or removes it.
func (q *Queue) FlushDir(dir string, failed bool) {
	q.mu.Lock()
	var todo []*pending
	for _, p := range q.byDir[dir] {
		if failed || !p.failed {
			todo = append(todo, p)
		}
	}
	q.mu.Unlock()
	for _, p := range todo {
		q.write(p)
	}
}

// write writes p to the store and records how it went. A directory that
// is gone (ENOENT) takes no value: it is never made again for one.
func (q *Queue) write(p *pending) {
	rel := p.rel()
	err := q.store.Write(rel, p.v.Data, p.own, &p.v.Stat.Mtim)
	gone := errors.Is(err, fs.ErrNotExist)
	q.mu.Lock()
	current := q.lookup(rel) == p // the caller holds the directory: nothing supersedes p meanwhile, but nothing is written for a value that is not the current one either
	wasFailed, wasHidden := p.failed, p.hidden
	switch {
	case !current:
	case err == nil || gone:
		q.remove(rel)
	default:
		q.setFailed(p, err)
	}
	hidden := p.hidden
	q.mu.Unlock()
	switch {
	case err == nil:
		q.store.Written(rel) // the store's own attributes from now on; the kernel's stay right
	case current && !wasFailed: // said once, not at every try
		q.log.Warn("derived file not written; written again in a moment", "file", rel, "err", err)
	}
	if current && (gone && !wasHidden || hidden && !wasHidden) {
		q.store.Changed(rel) // the store's file (or none) is served again, as it is
	}
}

// wantOfRoom reports whether err says a write lacked room (space, quota,
// descriptors, memory) rather than that the store is not as expected.
func wantOfRoom(err error) bool {
	for _, e := range []error{unix.ENOSPC, unix.EDQUOT, unix.EMFILE, unix.ENFILE, unix.ENOMEM} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
