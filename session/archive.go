package session

import (
	"errors"
	"io/fs"
	"path"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/loadcache"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/archive"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/reply"
	"github.com/ctxfs/ctxfs/session/searchop"
)

// takeWait bounds how long an archive waits for the requests that hold a
// session (a send recording its start) before it says EBUSY.
const takeWait = 5 * time.Second

// archiveOp answers the socket op archive: a dry run says whether the
// session would be taken ({"type":"archivable"}), else it is archived or
// deleted ({"type":"archived"} or {"type":"deleted"}); a refusal is the
// request's error.
func (e *Engine) archiveOp(c layout.Caller, loc *location, req *proto.Request) (*Reply, error) {
	if req.Archived {
		return e.archivedOp(c, loc, req)
	}
	verb := "archived"
	var err error
	switch {
	case req.DryRun:
		verb, err = "archivable", e.checkArchive(loc.ref)
	case req.Delete:
		verb, err = "deleted", e.Archive(loc.ref, loc.own, true)
	default:
		err = e.Archive(loc.ref, loc.own, false)
	}
	if err != nil {
		return nil, err
	}
	return reply.New([]*proto.Object{proto.NewObject("type", verb, "session", loc.ref.Name)}), nil
}

// Archive moves the session r, whole, to its archive (SPEC 12): one
// storefs.Move (never over anything) of its directory, so the archived tree is
// the live one byte for byte; then its name leaves the index (list,
// current, by-cwd, by-hash, by-uuid). A protected session is EBUSY, an
// existing target EEXIST; either way nothing changes. With del the
// session is deleted instead: moved aside under a hidden name (so a
// crash never leaves half a session in view), then removed.
//
// The session is taken out of the engine while it moves: a send that
// raced with it either recorded its start before (and then the session
// is active, so protected) or is refused with EBUSY; it never writes
// into the session mid-move or recreates it from half its files.
func (e *Engine) Archive(r layout.Ref, own storefs.Owner, del bool) error {
	return e.archiveIf(r, own, del, nil)
}

// archiveIf is Archive when still, asked once the session is taken out
// of the engine (nil: always), says nil: what chose the session is true
// still, with no send able to change it meanwhile.
func (e *Engine) archiveIf(r layout.Ref, own storefs.Owner, del bool, still func() error) error {
	if r.Temp || r.Kind != abi.KindAgent || (!del && !strings.HasPrefix(r.Home, "home/")) {
		return abi.Errorf(syscall.EINVAL, "archive", "only agent sessions are archived, to their home's archived_sessions (a shared space's sessions may be deleted)")
	}
	if err := e.protectedName(r); err != nil {
		return err
	}
	// EBUSY, not ENOENT: a send that waited must be refused, not create
	// the session anew from nothing.
	gone := &abi.Error{Op: "session", Errno: syscall.EBUSY, Msg: "session " + r.Name + " was archived while the request waited"}
	var left bool     // the session left its place: the index must not name it, whatever failed after
	var history int64 // what a deleted session held of its home's history, given back
	var selfID string // the self_id it held, for its home's index to forget
	err := e.sessions.Take(r.Key(), takeWait, gone, func(s *sess, loaded bool) (bool, error) {
		if !del {
			e.flushDerived(r.Rel(), s, true) // the store's files are what moves
		}
		if err := e.mayLeave(r, s, loaded, del, still); err != nil {
			if loaded {
				e.sessions.PutIfAbsent(r.Key(), s) // back, as it was
			}
			return false, err
		}
		// Before the move: nothing of it may write to the old place after.
		// A log left unsealed keeps it there (the next load finds it
		// unprovable, the next start replays it).
		if loaded && s.closeLogs() != nil {
			return false, abi.Errorf(syscall.EIO, "archive", "session %s: its logs could not be sealed; nothing was moved", r.Name)
		}
		// Nor may a value that waits, later: a deleted session's values
		// are moot, and a new session of the name must not get them.
		if del {
			history = e.deletedHistory(r) // its snapshots waiting to be written too
		}
		e.derived.Forget(r.Rel())
		selfID = layout.SessionSelfID(e.root, r.Rel())
		var moveErr error
		if del {
			left, moveErr = archive.Remove(e.root, r)
		} else {
			left, moveErr = archive.Move(e.root, r, own)
		}
		return true, moveErr
	})
	if errors.Is(err, loadcache.ErrBusy) {
		return abi.Errorf(syscall.EBUSY, "archive", "session %s is in use", r.Name)
	}
	if err != nil && !left {
		return err
	}
	// A sync or a removal that failed after the move is reported, but the
	// index is cleaned first: it named a session no longer in view.
	e.FreeTree().Forget(r.Home)   // its context/ left the free trees
	searchop.DropIndex(e.root, r) // and its search index, the server's, is moot
	e.selfMu.Lock()
	layout.ReleaseSelfID(e.root, r.Home, r.Rel(), selfID) // a live session's to hold
	e.selfMu.Unlock()
	if c := e.historyCharge(r.Home); c != nil {
		c.Give(history) // and a deleted one its history left the home
	}
	if uerr := e.unindex(r); err == nil {
		err = uerr
	}
	return err
}

// mayLeave is nil when the session at r may leave its place now (archived,
// or deleted when del), checked while archiveIf holds it: no protection,
// the caller's own condition (still), no run of it, no child writing to
// it, an archived one's values written, nothing of it waiting in the
// journal.
func (e *Engine) mayLeave(r layout.Ref, s *sess, loaded, del bool, still func() error) error {
	if err := e.protectedState(r); err != nil {
		return err
	}
	if still != nil {
		if err := still(); err != nil {
			return err
		}
	}
	if loaded {
		if err := hasRun(s); err != nil {
			return err
		}
	}
	if err := e.kids.Writing(r.Rel()); err != nil {
		return err
	}
	if !del {
		if err := e.settled(r); err != nil {
			return err
		}
	}
	return e.journaled(r)
}

// unindex takes a session that is gone out of its container's index, and
// has the kernel forget every index entry that named it.
func (e *Engine) unindex(r layout.Ref) error {
	x, err := e.Index(r.Container)
	if err != nil {
		return nil // no index to clean: it is rebuilt from the directories
	}
	idx := r.Container.Rel() + "/index"
	// The session's own path too: the kernel keeps names and attributes
	// for a long time and must drop the session's, not find them anew.
	changed := []string{r.Rel(), r.Container.Rel(), idx, idx + "/list", path.Dir(archive.Target(r))}
	for _, kind := range abi.IndexKinds {
		for _, k := range x.Keys(kind) {
			if v, _ := x.Lookup(kind, k); v == r.Name {
				changed = append(changed, idx+"/"+kind+"/"+k)
			}
		}
	}
	err = x.Remove(r.Name)
	e.changed(changed...)
	return err
}

// checkArchive says whether Archive would take the session r now: nil,
// or the protection that keeps it (EBUSY), without changing anything. It
// serves gc's preview, so that the one set of rules decides both.
func (e *Engine) checkArchive(r layout.Ref) error {
	if err := e.protectedName(r); err != nil {
		return err
	}
	e.derived.Flush(r.Rel(), true) // as Archive would
	if s, ok := e.sessions.Peek(r.Key()); ok {
		if err := hasRun(s); err != nil {
			return err
		}
	}
	if err := e.protectedState(r); err != nil {
		return err
	}
	if err := e.kids.Writing(r.Rel()); err != nil {
		return err
	}
	if err := e.settled(r); err != nil {
		return err
	}
	return e.journaled(r)
}

// hasRun is EBUSY for a loaded session that may not be closed now: a run
// queued or running, or an end still to be recorded.
func hasRun(s *sess) error {
	if !s.idle() {
		return abi.Errorf(syscall.EBUSY, "archive", "session %s has a run", s.ref.Name)
	}
	return nil
}

// settled is EBUSY while a derived file of the session waits to be
// written (its write failed, for want of room most likely): the archive
// would keep the store's older file, which nothing writes again there.
func (e *Engine) settled(r layout.Ref) error {
	if e.derived.Waits(r.Rel()) {
		return abi.Errorf(syscall.EBUSY, "archive", "session %s: a derived file cannot be written now (is the store full?)", r.Name)
	}
	return nil
}

// journaled refuses while the journal takes no appends, with its errno
// (EIO when it broke, EAGAIN when this host may no longer write): its
// files, kept for the next start, may hold appends of the session's logs
// that their seals do not vouch for yet, and the replay finds a log only
// where it was.
func (e *Engine) journaled(r layout.Ref) error {
	if err := e.wal.Err(); err != nil {
		return abi.Errorf(abi.Errno(err), "archive", "session %s: the write-ahead journal takes nothing more; nothing is moved until the server restarts", r.Name)
	}
	return nil
}

// protectedName refuses the names SPEC 12 never touches: index, default
// and the current session.
func (e *Engine) protectedName(r layout.Ref) error {
	if r.Name == "index" || r.Name == "default" {
		return abi.Errorf(syscall.EBUSY, "archive", "session %s is never archived", r.Name)
	}
	if x, err := e.Index(r.Container); err == nil && x.Current() == r.Name {
		return abi.Errorf(syscall.EBUSY, "archive", "session %s is the current session", r.Name)
	}
	return nil
}

// protectedState refuses a session whose state is active, unreadable or
// unsafe (not a regular file, an unknown value); a missing state is an
// old session and may go. A missing session is ENOENT.
func (e *Engine) protectedState(r layout.Ref) error {
	st, err := e.root.Lstat(r.Rel())
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return notFound("session", r.Name)
	case err != nil:
		return err
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return abi.Errorf(syscall.EBUSY, "archive", "session %s is not a directory", r.Name)
	}
	state, err := e.readValue(r.Rel() + "/" + abi.FileState)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return abi.Errorf(syscall.EBUSY, "archive", "session %s: its state cannot be read", r.Name)
	case !abi.ValidState(state):
		return abi.Errorf(syscall.EBUSY, "archive", "session %s: unknown state %q", r.Name, state)
	case state == abi.StateActive:
		return abi.Errorf(syscall.EBUSY, "archive", "session %s is active", r.Name)
	}
	return nil
}

// GCIdle archives (never deletes) every agent session in a home whose
// name matches archive.IdlePattern and that nothing has updated for idle
// (ctxfs mount --gc-idle): the same Archive as ctx's, with the same
// protections, so an active or current session stays. It returns the
// store paths of the sessions it archived.
func (e *Engine) GCIdle(idle time.Duration) []string {
	var done []string
	cutoff := time.Now().Add(-idle).Unix()
	archive.EachIdle(e.root, cutoff, e.readUnix, func(s archive.Idle) {
		err := e.archiveIdle(s, cutoff)
		if err == nil {
			done = append(done, s.Rel)
		} else if !errors.Is(err, syscall.EBUSY) && !errors.Is(err, syscall.EEXIST) {
			e.cfg.Log.Warn("gc-idle: not archived", "session", s.Rel, "err", err)
		}
	})
	return done
}

// archiveIdle archives s, found idle since cutoff, if it is idle still
// once taken out of the engine: a send between the two moved updated_at
// (written to the store before the check, with the session's other
// values). EBUSY otherwise, nothing changed.
func (e *Engine) archiveIdle(s archive.Idle, cutoff int64) error {
	return e.archiveIf(s.Ref, s.Own, false, func() error {
		if u := e.readUnix(s.Rel + "/" + abi.FileUpdatedAt); u == 0 || u > cutoff {
			return abi.Errorf(syscall.EBUSY, "gc-idle", "session %s was used since it was found idle", s.Ref.Name)
		}
		return nil
	})
}
