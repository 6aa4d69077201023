package session

import (
	"errors"
	"os"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Derived files (state, updated_at, latest.md, the snapshots) are written
// behind: a send puts the new value in memory (behind.put), where the
// engine serves it at once (Value, Stat, ReadFile, readValue and Lookup
// all look here first), and a goroutine writes what waits to the store
// every behindEvery. A value changed twice meanwhile (state active, then
// done, and the sends after) is written once. What must see the store's
// files as they are writes the session's values first: an archive or a
// delete (and its preview), a touch of a value's times, the session
// leaving the cache, the server stopping. The values are derived from the
// logs, which are durable before anything is acknowledged, and loading a
// session re-derives state, latest.md and updated_at (sess.reconcile), so
// a crash that loses a value waiting here loses nothing the logs do not
// hold (a snapshot is written again at the next run).
//
// Measured (BenchmarkDurableSends, server CPU profile): replacing them in
// the store at every send (a spare twin and a rename each, four to five
// times a send) was 18–21% of the server's CPU; written every 100 ms,
// 4.7%; every second, about 2% (the writes, and keeping each value).
// Half a second keeps most of that and lets a second (integration tests'
// settle) see the store settled.
//
// A value whose write failed is written again at the next pass.
const behindEvery = 500 * time.Millisecond

// behind holds the derived values not yet in the store, by store path.
// A value whose write failed is written again every behindEvery until it
// holds: a derived file always ends consistent with the logs, not only
// when its session loads again. Meanwhile a value that failed for want of
// room (ENOSPC, EDQUOT, EMFILE, ENFILE, ENOMEM) is still served: it is
// what the logs say. One that failed otherwise (something planted where
// the file or its spare twin goes, an I/O error) is not: the store's file
// is served as it is, so the mount shows what fsck will name.
type behind struct {
	e      *Engine
	mu     sync.Mutex
	byRel  map[string]*pendingValue
	bySess map[*sess]int // values waiting, by session
	failed map[*sess]int // of which whose last write failed
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

// pendingValue is the value one derived file must still get, with the
// attributes its store file will have.
type pendingValue struct {
	s      *sess
	name   string
	v      Value
	failed bool // its last write failed: written again at the next pass
	hidden bool // failed, and not for want of room: not served
}

func newBehind(e *Engine) *behind {
	return &behind{e: e, byRel: map[string]*pendingValue{}, bySess: map[*sess]int{}, failed: map[*sess]int{},
		stop: make(chan struct{}), done: make(chan struct{})}
}

// put makes data the value of s's file name, written to the store within
// behindEvery (failed: the error of a write of it that failed just now;
// it is written again then). Caller holds s.fileMu, and announces the
// change (changed) after put returns.
func (d *behind) put(s *sess, name string, data []byte, failed error) {
	p := &pendingValue{s: s, name: name, v: Value{Data: data, Stat: s.valueStat(len(data))}}
	rel := s.file(name)
	d.mu.Lock()
	d.remove(rel)
	d.byRel[rel] = p
	d.bySess[s]++
	d.setFailed(p, failed)
	d.mu.Unlock()
}

// setFailed records how p's last write ended (nil: it did not fail);
// caller holds mu.
func (d *behind) setFailed(p *pendingValue, err error) {
	failed := err != nil
	p.hidden = failed && !wantOfRoom(err)
	switch {
	case failed && !p.failed:
		d.failed[p.s]++
	case !failed && p.failed:
		if d.failed[p.s]--; d.failed[p.s] == 0 {
			delete(d.failed, p.s)
		}
	}
	p.failed = failed
}

// valueStat is what the store file of a derived value of size bytes will
// say once written (replaceValue gives it the session's owner and mode):
// its times are now, when the value changed.
func (s *sess) valueStat(size int) unix.Stat_t {
	st := unix.Stat_t{Mode: unix.S_IFREG | uint32(s.own.FileMode.Perm()), Nlink: 1, Size: int64(size), Blksize: 4096}
	st.Uid, st.Gid = uint32(s.own.Uid), uint32(s.own.Gid)
	if os.Geteuid() != 0 || s.own.Uid < 0 { // it cannot give files away (storefs.Fchown)
		st.Uid, st.Gid = uint32(os.Geteuid()), uint32(os.Getegid())
	}
	st.Blocks = (st.Size + 4095) / 4096 * 8
	now := unix.NsecToTimespec(time.Now().UnixNano())
	st.Atim, st.Mtim, st.Ctim = now, now, now
	return st
}

// value is the value waiting for rel, when one is served.
func (d *behind) value(rel string) (Value, bool) {
	if d == nil {
		return Value{}, false // an engine that serves nothing (NewSpaces)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if p := d.byRel[rel]; p != nil && !p.hidden {
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

// remove forgets rel's value; caller holds mu.
func (d *behind) remove(rel string) {
	if p := d.byRel[rel]; p != nil {
		delete(d.byRel, rel)
		d.setFailed(p, nil)
		if d.bySess[p.s]--; d.bySess[p.s] == 0 {
			delete(d.bySess, p.s)
		}
	}
}

// holdsFailed reports whether a value of s whose write failed waits to
// be written again: the session is kept until it is (idle). Values
// merely waiting are written when it goes (closeLogs).
func (d *behind) holdsFailed(s *sess) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.failed[s] > 0
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
			d.flush(nil, true)
		}
	}
}

// flush writes what waits: of s (nil: of every session), and with failed
// also the values whose last write failed. It returns once they are in
// the store or have failed again.
func (d *behind) flush(s *sess, failed bool) {
	d.mu.Lock()
	var todo []*sess
	for o := range d.bySess {
		if s == nil || o == s {
			todo = append(todo, o)
		}
	}
	d.mu.Unlock()
	for _, o := range todo {
		d.flushSess(o, failed)
	}
}

// flushSess writes s's waiting values under s.fileMu, so that no newer
// value or user's write lands between the write and its removal here.
func (d *behind) flushSess(s *sess, failed bool) {
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	d.mu.Lock()
	var todo []*pendingValue
	for _, p := range d.byRel {
		if p.s == s && (failed || !p.failed) {
			todo = append(todo, p)
		}
	}
	d.mu.Unlock()
	for _, p := range todo {
		rel := s.file(p.name)
		err := d.e.replaceValue(rel, p.v.Data, s.own, &p.v.Stat.Mtim)
		d.mu.Lock()
		current := d.byRel[rel] == p // else superseded meanwhile by a session loaded anew after this one closed with a write that failed: the newer value is written next
		wasFailed, wasHidden := p.failed, p.hidden
		switch {
		case !current:
		case err == nil:
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
			os.Stderr.WriteString("ctxfs: " + s.ref.Rel() + "/" + p.name + ": " + err.Error() + " (written again in a moment)\n")
		}
		if current && hidden && !wasHidden {
			d.e.changed(rel) // the store's file is served again, as it is
		}
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
		os.Stderr.WriteString("ctxfs: " + s.ref.Rel() + "/" + name + ": " + err.Error() + " (written again in a moment)\n")
		s.e.derived.put(s, name, []byte(value), err)
		return
	}
	s.e.derived.drop(s, name) // an older value still to be written is superseded
	s.present[name] = true
	s.e.changed(s.ref.Rel() + "/" + name)
}

// flushDerived writes the session's derived values waiting in memory to
// the store now: before anything reads or moves the store's files of the
// session as they are (archive, delete).
func (s *sess) flushDerived() { s.e.derived.flush(s, false) }

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
	p := d.byRel[rel]
	d.mu.Unlock()
	if p != nil {
		d.flushSess(p.s, true)
	}
}
