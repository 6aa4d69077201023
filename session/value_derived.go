package session

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/behind"
	"github.com/ctxfs/ctxfs/session/layout"
)

// Derived files (state, updated_at, latest.md, the snapshots) are written
// behind (package behind): a send puts the new value in the queue
// (putDerived), where the engine serves it at once (Value, Stat,
// ReadFile, readValue and Lookup all look there first), and the queue
// writes what waits to the store every behind.Every. What must see the
// store's files as they are writes the session's values first: an
// archive (and its preview), a touch of a value's times, the session
// leaving the cache, the server stopping; a delete forgets them. Loading
// a session re-derives state, latest.md and updated_at (sess.reconcile),
// so a crash that loses a value waiting there loses nothing the logs do
// not hold.

// derivedStore is the engine's side of the queue (behind.Store): its
// writer, its sessions held, its announcements.
type derivedStore struct{ e *Engine }

func (d derivedStore) Write(rel string, data []byte, own storefs.Owner, mtime *unix.Timespec) error {
	return layout.ReplaceValue(d.e.root, rel, data, own, mtime)
}

// Hold holds the session directory dir as a write of its values needs:
// its loaded session's fileMu taken, or, not loaded, its cache key
// (loadcache.Cache.Hold), so that nothing else writes into the directory,
// moves or removes it meanwhile.
func (d derivedStore) Hold(dir string, fn func()) {
	d.e.sessions.Hold(dir, func(s *sess, _ bool) { s.withFiles(fn) })
}

func (d derivedStore) Changed(rels ...string) { d.e.changed(rels...) }

func (d derivedStore) Written(rel string) { d.e.memo.Forget(rel) }

// withFiles runs fn with s.fileMu taken (s nil: a session not loaded,
// whose cache key the caller holds: fn alone).
func (s *sess) withFiles(fn func()) {
	if s != nil {
		s.fileMu.Lock()
		defer s.fileMu.Unlock()
	}
	fn()
}

// flushDerived writes the derived values waiting for the session
// directory dir (with failed, also those whose last write failed). The
// caller holds dir's cache key (a take, a close), s being its loaded
// session or nil.
func (e *Engine) flushDerived(dir string, s *sess, failed bool) {
	s.withFiles(func() { e.derived.FlushDir(dir, failed) })
}

// putDerived makes data the value of s's derived file name, served at
// once and written behind (failed: the error of a write of it that
// failed just now). Caller holds s.fileMu, and announces the change
// (changed) after.
func (s *sess) putDerived(name string, data []byte, failed error) {
	s.e.derived.Put(s.rel, name, s.own, behind.Value{Data: data, Stat: s.valueStat(len(data))}, failed)
}

// valueStat is what the store file of a derived value of size bytes will
// say once written (layout.ReplaceValue gives it the session's owner and mode):
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
	s.putDerived(name, []byte(value), nil)
	s.e.changed(s.ref.Rel() + "/" + name)
}

// writeNowLocked replaces a derived file in the store now (layout.ReplaceValue).
// A failure does not fail the run (the logs, which it is derived from, are
// durable already): it is reported on stderr for the operator, and the
// value is written again until it holds. Caller holds s.fileMu.
func (s *sess) writeNowLocked(name, value string) {
	if err := layout.ReplaceValue(s.e.root, s.file(name), []byte(value), s.own, nil); err != nil {
		s.e.cfg.Log.Warn("derived file not written; written again in a moment", "file", s.ref.Rel()+"/"+name, "err", err)
		s.putDerived(name, []byte(value), err)
		return
	}
	s.e.derived.Drop(s.file(name)) // an older value still to be written is superseded
	s.present[name] = true
	s.e.changed(s.ref.Rel() + "/" + name)
}
