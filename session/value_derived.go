package session

import (
	"container/list"
	"errors"
	"io/fs"
	"os"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/layout"
)

// Derived files (state, updated_at, latest.md, the snapshots) are written
// behind: a send puts the new value in memory (behind.put), where the
// engine serves it at once (Value, Stat, ReadFile, readValue and Lookup
// all look here first), and a goroutine writes what waits to the store
// every behindEvery. A value changed twice meanwhile (state active, then
// done, and the sends after) is written once. What must see the store's
// files as they are writes the session's values first: an archive (and
// its preview), a touch of a value's times, the session leaving the
// cache, the server stopping; a delete forgets them. The values are derived from the
// logs, which are durable before anything is acknowledged, and loading a
// session re-derives state, latest.md and updated_at (sess.reconcile), so
// a crash that loses a value waiting here loses nothing the logs do not
// hold (a snapshot is written again at the next run).
//
// Replacing them in the store at every send was a fifth of the server's
// CPU (docs/benchmarks.md#derived-values-written-behind); half a second
// keeps most of the saving and lets a second (the integration tests'
// settle) see the store settled.
//
// A value whose write failed is written again at the next pass, whether
// its session is still loaded or not (behind.release).
const behindEvery = 500 * time.Millisecond

// behind holds the derived values not yet in the store, by session
// directory and file name.
// A value whose write failed is written again every behindEvery until it
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
// the store's door like every write, with the session's cache key held so
// that no load, archive or delete of it happens meanwhile (flush). The
// failed values of sessions not loaded ("loose") are bounded
// (maxLoose, maxLooseBytes): beyond, the oldest is forgotten, which loses
// nothing the logs do not hold, as a crash would (see behindEvery).
type behind struct {
	e     *Engine
	mu    sync.Mutex
	byDir map[string]map[string]*pendingValue // by session directory, then file name
	// loose are the values of sessions not loaded, oldest first, and
	// looseBytes their size; at most maxLoose values and maxLooseBytes.
	loose                   *list.List
	looseBytes              int
	maxLoose, maxLooseBytes int
	stop                    chan struct{}
	done                    chan struct{}
	once                    sync.Once
}

// The bound of the failed values kept for sessions not loaded. A session
// leaves three (state, updated_at, latest.md; cwd and the snapshots when
// they changed too): a few bytes each but latest.md, one message (at most
// abi.MaxLineBytes), and the snapshots (AGENTS.md, up to a MiB a
// directory of the cwd). 4096 values, 16 MiB: the last values of more
// than a thousand sessions, or of sixteen with the largest latest.md, at
// about 17 MiB of memory at worst; each pass tries them all again (a
// failed write is a few system calls: 4096 of them take milliseconds).
// What is forgotten is derived again: state, latest.md and updated_at
// when the session loads (sess.reconcile), the snapshots at its next run,
// cwd at the next send that names another (until then the store's file
// says the previous one).
const (
	maxLoose      = 4096
	maxLooseBytes = 16 << 20
)

// pendingValue is the value one derived file must still get, with the
// attributes its store file will have.
type pendingValue struct {
	dir    string // the session directory, the session's cache key
	name   string
	own    storefs.Owner // the file's owner and mode (replaceValue)
	v      Value
	failed bool          // its last write failed: written again at the next pass
	hidden bool          // failed, and not for want of room: not served
	loose  *list.Element // in behind.loose while its session is not loaded
}

func (p *pendingValue) rel() string { return p.dir + "/" + p.name }

func newBehind(e *Engine) *behind {
	return &behind{e: e, byDir: map[string]map[string]*pendingValue{},
		loose: list.New(), maxLoose: maxLoose, maxLooseBytes: maxLooseBytes,
		stop: make(chan struct{}), done: make(chan struct{})}
}

// put makes data the value of s's file name, written to the store within
// behindEvery (failed: the error of a write of it that failed just now;
// it is written again then). Caller holds s.fileMu, and announces the
// change (changed) after put returns.
func (d *behind) put(s *sess, name string, data []byte, failed error) {
	p := &pendingValue{dir: s.rel, name: name, own: s.own, v: Value{Data: data, Stat: s.valueStat(len(data))}}
	d.mu.Lock()
	d.remove(p.rel())
	if d.byDir[p.dir] == nil {
		d.byDir[p.dir] = map[string]*pendingValue{}
	}
	d.byDir[p.dir][name] = p
	d.setFailed(p, failed)
	d.mu.Unlock()
}

// setFailed records how p's last write ended (nil: it did not fail);
// caller holds mu.
func (d *behind) setFailed(p *pendingValue, err error) {
	p.failed = err != nil
	p.hidden = p.failed && !wantOfRoom(err)
}

// valueStat is what the store file of a derived value of size bytes will
// say once written (replaceValue gives it the session's owner and mode):
// its times are now, when the value changed.
func (s *sess) valueStat(size int) unix.Stat_t {
	st := unix.Stat_t{Mode: unix.S_IFREG | uint32(s.own.FileMode.Perm()), Nlink: 1, Size: int64(size), Blksize: 4096}
	st.Uid, st.Gid = uint32(s.own.Uid), uint32(s.own.Gid)
	if layout.ServerUid != 0 || s.own.Uid < 0 { // it cannot give files away (storefs.Fchown)
		st.Uid, st.Gid = uint32(layout.ServerUid), uint32(layout.ServerGid)
	}
	st.Blocks = (st.Size + 4095) / 4096 * 8
	now := unix.NsecToTimespec(time.Now().UnixNano())
	st.Atim, st.Mtim, st.Ctim = now, now, now
	return st
}

// value is the value waiting for rel, when one is served.
func (d *behind) value(rel string) (Value, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p := d.lookup(rel); p != nil && !p.hidden {
		return p.v, true
	}
	return Value{}, false
}

// drop forgets what waits for s's file name: a user's value written
// through the mount supersedes it. Caller holds s.fileMu.
func (d *behind) drop(s *sess, name string) {
	d.mu.Lock()
	d.remove(s.file(name))
	d.mu.Unlock()
}

// lookup is the value waiting for rel, or nil; caller holds mu.
func (d *behind) lookup(rel string) *pendingValue {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return nil // not a file of a session
	}
	return d.byDir[rel[:i]][rel[i+1:]]
}

// remove forgets rel's value; caller holds mu.
func (d *behind) remove(rel string) {
	p := d.lookup(rel)
	if p == nil {
		return
	}
	if delete(d.byDir[p.dir], p.name); len(d.byDir[p.dir]) == 0 {
		delete(d.byDir, p.dir)
	}
	d.unloose(p)
}

// unloose takes p out of the loose values; caller holds mu.
func (d *behind) unloose(p *pendingValue) {
	if p.loose != nil {
		d.loose.Remove(p.loose)
		d.looseBytes -= len(p.v.Data)
		p.loose = nil
	}
}

// attach marks the values of the session directory dir as its loaded
// session's again (not loose): the session is loading. A loaded session
// never loses a value to the bound, which would leave its store file
// behind the logs until it loads again.
func (d *behind) attach(dir string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.byDir[dir] {
		d.unloose(p)
	}
}

// release marks the values still waiting for the session directory dir
// loose: its session left the cache (or did not load) with them, whose
// writes failed. The oldest loose values beyond the bound are forgotten:
// a session not loaded derives them again when it loads (see maxLoose).
func (d *behind) release(dir string) {
	d.mu.Lock()
	for _, p := range d.byDir[dir] {
		if p.loose == nil {
			p.loose = d.loose.PushBack(p)
			d.looseBytes += len(p.v.Data)
		}
	}
	var forgotten []string
	for d.loose.Len() > d.maxLoose || d.looseBytes > d.maxLooseBytes {
		p := d.loose.Front().Value.(*pendingValue)
		d.remove(p.rel())
		forgotten = append(forgotten, p.rel())
	}
	d.mu.Unlock()
	for _, rel := range forgotten {
		d.e.cfg.Log.Warn("derived file not written for want of room; derived again from the logs when its session loads", "file", rel)
	}
	d.e.changed(forgotten...) // the store's file is served again, as it is
}

// forget drops every value waiting for the session directory dir, which
// is being archived or deleted: nothing is written into it after. Caller
// holds dir's cache key (loadcache.Cache.Take).
func (d *behind) forget(dir string) {
	d.mu.Lock()
	var rels []string
	for _, p := range d.byDir[dir] {
		rels = append(rels, p.rel())
	}
	for _, rel := range rels {
		d.remove(rel)
	}
	d.mu.Unlock()
	d.e.changed(rels...)
}

// waits reports whether a value of the session directory dir is still to
// be written.
func (d *behind) waits(dir string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.byDir[dir]) > 0
}

// run writes what waits every behindEvery, until close.
func (d *behind) run() {
	defer close(d.done)
	t := time.NewTicker(behindEvery)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
			d.flush("", true)
		}
	}
}

// flush writes what waits: of the session directory only ("": of every
// session), and with failed also the values whose last write failed. It
// returns once they are in the store or have failed again. Each session
// is held meanwhile (loadcache.Cache.Hold), loaded or not; the caller must not hold
// a session's key (a load, a close, a take).
func (d *behind) flush(only string, failed bool) {
	d.mu.Lock()
	var dirs []string
	for dir := range d.byDir {
		if only == "" || dir == only {
			dirs = append(dirs, dir)
		}
	}
	d.mu.Unlock()
	for _, dir := range dirs {
		d.e.sessions.Hold(dir, func(s *sess, _ bool) { d.flushDir(dir, s, failed) })
	}
}

// flushDir writes the waiting values of the session directory dir. The
// caller holds dir: its loaded session s (whose fileMu is taken here, so
// that no newer value or user's write lands between a write and its
// removal here), or, s nil, its cache key, so that nothing else writes
// into the directory, moves or removes it meanwhile.
func (d *behind) flushDir(dir string, s *sess, failed bool) {
	if s != nil {
		s.fileMu.Lock()
		defer s.fileMu.Unlock()
	}
	d.mu.Lock()
	var todo []*pendingValue
	for _, p := range d.byDir[dir] {
		if failed || !p.failed {
			todo = append(todo, p)
		}
	}
	d.mu.Unlock()
	for _, p := range todo {
		d.write(p)
	}
}

// write writes p to the store and records how it went. A directory that
// is gone (ENOENT) takes no value: it is never made again for one.
func (d *behind) write(p *pendingValue) {
	rel := p.rel()
	err := d.e.replaceValue(rel, p.v.Data, p.own, &p.v.Stat.Mtim)
	gone := errors.Is(err, fs.ErrNotExist)
	d.mu.Lock()
	current := d.lookup(rel) == p // the caller holds the directory: nothing supersedes p meanwhile, but nothing is written for a value that is not the current one either
	wasFailed, wasHidden := p.failed, p.hidden
	switch {
	case !current:
	case err == nil || gone:
		d.remove(rel)
	default:
		d.setFailed(p, err)
	}
	hidden := p.hidden
	d.mu.Unlock()
	switch {
	case err == nil:
		d.e.memo.forget(rel) // the store's own attributes from now on; the kernel's stay right
	case current && !wasFailed: // said once, not at every try
		d.e.cfg.Log.Warn("derived file not written; written again in a moment", "file", rel, "err", err)
	}
	if current && (gone && !wasHidden || hidden && !wasHidden) {
		d.e.changed(rel) // the store's file (or none) is served again, as it is
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

func (d *behind) close() {
	d.once.Do(func() { close(d.stop) })
	<-d.done
}

// writeFileLocked makes value the new content of one of the session's
// derived files, served at once and written to the store behind (see
// behind). A file the store does not hold yet as a regular file (the
// first AGENTS.md; something planted) is written at once: a name that
// comes changes its directory, whose listing the kernel keeps until the
// store's directory changes, and a planted thing is refused as before,
// the store's file served as it is. Caller holds s.fileMu.
func (s *sess) writeFileLocked(name, value string) {
	if !s.present[name] {
		st, err := s.e.root.Lstat(s.file(name))
		if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			s.writeNowLocked(name, value)
			return
		}
		s.present[name] = true
	}
	s.e.derived.put(s, name, []byte(value), nil)
	s.e.changed(s.ref.Rel() + "/" + name)
}

// writeNowLocked replaces a derived file in the store now (replaceValue).
// A failure does not fail the run (the logs, which it is derived from, are
// durable already): it is reported on stderr for the operator, and the
// value is written again until it holds. Caller holds s.fileMu.
func (s *sess) writeNowLocked(name, value string) {
	if err := s.e.replaceValue(s.file(name), []byte(value), s.own, nil); err != nil {
		s.e.cfg.Log.Warn("derived file not written; written again in a moment", "file", s.ref.Rel()+"/"+name, "err", err)
		s.e.derived.put(s, name, []byte(value), err)
		return
	}
	s.e.derived.drop(s, name) // an older value still to be written is superseded
	s.present[name] = true
	s.e.changed(s.ref.Rel() + "/" + name)
}

// futimens sets an open file's access and modification times.
func futimens(f *os.File, atime, mtime unix.Timespec) error {
	ts := [2]unix.Timespec{atime, mtime}
	_, _, errno := unix.Syscall6(unix.SYS_UTIMENSAT, f.Fd(), 0, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// flushRel writes the derived value waiting for rel, if one does, now.
func (d *behind) flushRel(rel string) {
	d.mu.Lock()
	p := d.lookup(rel)
	d.mu.Unlock()
	if p != nil {
		d.flush(p.dir, true)
	}
}
