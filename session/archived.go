package session

import (
	"errors"
	"io/fs"
	"path"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/archive"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/reply"
)

// archivedOp answers op archive of an archived session ("archived":
// true): a dry run says whether there is one of that name
// (FrameDeletable), else it is deleted (FrameDeleted).
func (e *Engine) archivedOp(c layout.Caller, loc *location, req *proto.Request) (*Reply, error) {
	r, err := archivedRef(c, loc, req)
	if err != nil {
		return nil, err
	}
	verb := proto.FrameDeleted
	if req.DryRun {
		verb, err = proto.FrameDeletable, e.archivedDir(r)
	} else {
		err = e.DeleteArchived(r)
	}
	if err != nil {
		return nil, err
	}
	return reply.New([]*proto.Object{proto.NewObject("type", verb, "session", r.Name)}), nil
}

// archivedRef is the archived session a request names: of the request's
// agent, in the home it was sent to (the caller's; a ctl file's
// session's) or, for root, the home of the request's uid. Another uid's
// is EACCES, as its home is to the caller through the mount (0700); a
// model's sessions are never archived (EINVAL).
func archivedRef(c layout.Caller, loc *location, req *proto.Request) (layout.Ref, error) {
	ct := loc.ref.Container
	if loc.scope != abi.ScopePrivate { // a shared session's ctl file
		return layout.Ref{}, abi.Errorf(syscall.EINVAL, "archive", "%s", proto.NoArchiveInSpace)
	}
	if ct.Kind != abi.KindAgent {
		return layout.Ref{}, abi.Errorf(syscall.EINVAL, "archive", "only agent sessions are archived: a model has no archived session")
	}
	uid, _ := layout.HomeUid(ct.Home) // the caller's, or a ctl file's session's
	if req.HomeUid != nil {
		uid = *req.HomeUid
	}
	if uid != c.Uid && c.Uid != 0 {
		return layout.Ref{}, abi.Errorf(syscall.EACCES, "archive", "only root deletes an archived session of another uid's home")
	}
	ct.Home = layout.PrivateHome(uid)
	return layout.Ref{Container: ct, Name: req.Session}, nil
}

// archivedDir is nil when the archived session r is there: ENOENT when
// it is not, EIO (storefs.UnsafeError) for anything but a directory,
// which only root could have put there in the store.
func (e *Engine) archivedDir(r layout.Ref) error {
	rel := archive.Target(r)
	st, err := e.root.Lstat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &abi.Error{Op: "archive", Path: r.Name, Errno: syscall.ENOENT, Msg: "no such archived session"}
	case err != nil:
		return err
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return &storefs.UnsafeError{Op: "archive", Path: e.root.Show(rel), What: storefs.TypeName(st.Mode) + ", not a directory"}
	}
	return nil
}

// DeleteArchived deletes the archived session r, whole, as a live
// session's delete is made (archive.RemoveArchived: aside under a hidden
// name first, so a crash never leaves half of it in view), and gives its
// bytes of history back to its home's uid. Nothing of the live sessions
// changes: the archive left their index when it was made. Archived
// sessions are not loaded in the engine, and nothing writes to them, so
// nothing is taken out of use first.
func (e *Engine) DeleteArchived(r layout.Ref) error {
	if err := e.archivedDir(r); err != nil {
		return err
	}
	// Counted before the move: the count walks session names, not the
	// hidden one, and bytes counted after it would be given back twice.
	counted := e.countHistory(r.Home)
	var freed int64
	left, err := archive.RemoveArchived(e.root, r, func(aside string) {
		if counted {
			freed = e.historyBytes(aside)
		}
	})
	if left {
		if c := e.historyCharge(r.Home); c != nil {
			c.Give(freed)
		}
		rel := archive.Target(r)
		e.changed(rel, path.Dir(rel))
	}
	return err
}

// removeArchiveLeftovers removes from home's archive what deletions of
// archived sessions left when they were interrupted (layout.IsDelDir).
// The engine runs it at the uid's first count of history after a start,
// before any such deletion of this start can be under way (each has the
// uid counted first).
func (e *Engine) removeArchiveLeftovers(home string) {
	for _, dir := range layout.ArchiveDirs(e.root, home) {
		e.root.RemoveTemps(dir, layout.IsDelDir)
	}
}
