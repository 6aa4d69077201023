package fs

import (
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/ctxfs/ctxfs/session/archive"
	"github.com/ctxfs/ctxfs/session/layout"
)

// life is one life of a session at its path, from its first node until
// it is archived or deleted: the ABI's twin of the free trees' freeIDs.
// ABI nodes are numbered by their path (inoOf), and go-fuse answers a
// LOOKUP with the node it holds for the same number and generation. With
// one generation for all, a session archived or deleted while a file of
// it was held (a descriptor of messages.jsonl opened for appending, of
// state for futimes) left that node addressed by its old path: a line
// written through it after the archive landed in a session made anew at
// the path, a futimes set that session's times, and a lookup of the new
// session's file was given the held node. So the nodes of a session
// carry the generation of its life there; once the session is gone from
// its path (Mounts.announced) its life ends, its nodes act on where it
// went (its archive, read only) or on nothing (deleted: ENOENT), and the
// next lookup there starts a new life, with nodes of its own.
type life struct {
	rel string // the session's path
	gen uint64
	// went is nil while the session lives at rel; then where it went: its
	// archived place, or "" when it was deleted.
	went atomic.Pointer[string]
}

// lives holds the life of each session path some node stands for. An
// entry lives as long as a node holds it (as identities), so the table is
// bounded by the nodes alive.
type lives struct {
	t    weakTable[string, life]
	next uint64 // the last generation given (under t's lock)
}

// inSession reports whether a node of pl belongs to a live session's
// life: the session directory and everything the ABI shows in it (its
// free trees are freeNodes, numbered by the store: freeIDs).
func inSession(pl layout.Place) bool {
	switch pl.Kind {
	case layout.PlaceSession, layout.PlaceLog, layout.PlaceValue, layout.PlaceReadOnly,
		layout.PlaceCtl, layout.PlaceVersionsDir, layout.PlaceVersion:
		return pl.Session != ""
	}
	return false
}

// of is the life of the session pl lies in (nil for a place outside
// sessions), begun when no node holds one.
func (ls *lives) of(pl layout.Place) *life {
	if !inSession(pl) {
		return nil
	}
	rel := pl.Ref().Rel()
	return ls.t.get(rel, func() *life {
		ls.next++
		return &life{rel: rel, gen: ls.next}
	})
}

// living is the life of the session at rel, nil when no node holds one.
func (ls *lives) living(rel string) *life { return ls.t.held(rel) }

// end ends l, which went to went ("" when deleted): its nodes no longer
// stand for rel, and the next node there begins a new life.
func (ls *lives) end(l *life, went string) {
	l.went.Store(&went)
	ls.t.forget(l.rel, l)
}

// sessionGone ends the life of the session rel when the store no longer
// holds it there (Mounts.announced, for a session's change): it went to
// its archive when the store holds that, else it was deleted. The engine
// announces an archive or a delete right after the move, before it
// answers; a session made anew at rel in between (by its owner, racing
// their own archive) would keep the old life, as before this.
func (ms *Mounts) sessionGone(rel string, pl layout.Place) {
	l := ms.lives.living(rel)
	if l == nil || !ms.e.Gone(rel) {
		return
	}
	went := archive.Target(pl.Ref())
	if ms.e.Gone(went) {
		went = ""
	}
	ms.lives.end(l, went)
}

// generation is the generation of a node of l (1 outside sessions).
func (l *life) generation() uint64 {
	if l == nil {
		return 1
	}
	return l.gen
}

// now is the store path of a node of l whose path is rel: rel while the
// session lives there; once it is gone, the same file where the session
// went, or ENOENT when it was deleted.
func (l *life) now(rel string) (string, syscall.Errno) {
	if l == nil {
		return rel, 0
	}
	went := l.went.Load()
	switch {
	case went == nil:
		return rel, 0
	case *went == "":
		return "", syscall.ENOENT
	}
	return *went + strings.TrimPrefix(rel, l.rel), 0
}

// ended is what a change through a node of l is refused with once its
// session is gone from its path (0 while it lives there): EPERM when it
// was archived (archived sessions are read only, SPEC 12), ENOENT when it
// was deleted.
func (l *life) ended() syscall.Errno {
	if l == nil || l.went.Load() == nil {
		return 0
	}
	if *l.went.Load() == "" {
		return syscall.ENOENT
	}
	return syscall.EPERM
}
