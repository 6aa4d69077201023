package session

import (
	"errors"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/layout"
)

// location is where a request's session lives and who owns what it creates.
type location struct {
	ref   layout.Ref
	own   storefs.Owner
	scope string
	space string
}

// locate resolves a request's scope to its session (SPEC section 8, step 2):
// private → the caller's home, shared → the named space (which must exist
// and let the caller in), temp → memory only.
func (e *Engine) locate(c layout.Caller, t Target, req *proto.Request) (*location, error) {
	ct := layout.Container{Kind: t.Kind, Owner: t.Owner}
	loc := &location{scope: req.Scope, space: req.Space}
	switch req.Scope {
	case abi.ScopePrivate, abi.ScopeTemp:
		ct.Home = layout.PrivateHome(c.Uid)
		loc.own = layout.PrivateOwner(c.Uid, c.Gid)
		if req.Scope == abi.ScopePrivate {
			if err := e.EnsureHome(c.Uid); err != nil {
				return nil, err
			}
		}
	case abi.ScopeShared:
		ct.Home = layout.SharedHome(req.Space)
		st, err := e.spaceAccess(c, req.Space)
		if err != nil {
			return nil, err
		}
		loc.own = layout.SharedOwner(c.Uid, st.Gid)
	}
	loc.ref = layout.Ref{Container: ct, Name: req.Session, Temp: req.Scope == abi.ScopeTemp}
	return loc, nil
}

// locateRef is locate for a session named by its path (a control file):
// the session's home decides the scope and the owner of new files.
func (e *Engine) locateRef(c layout.Caller, r layout.Ref) (*location, error) {
	loc := &location{ref: r, scope: scopeOfHome(r.Home)}
	if loc.scope == abi.ScopeShared {
		loc.space = layout.SpaceOf(r.Home)
		st, err := e.spaceAccess(c, loc.space)
		if err != nil {
			return nil, err
		}
		loc.own = layout.SharedOwner(c.Uid, st.Gid)
		return loc, nil
	}
	uid, ok := layout.HomeUid(r.Home)
	if !ok {
		return nil, abi.Errorf(syscall.EINVAL, "", "bad home %q", r.Home)
	}
	if c.Uid != 0 && uid != c.Uid {
		return nil, abi.Errorf(syscall.EACCES, "", "another uid's home")
	}
	loc.own = layout.PrivateOwner(uid, storefs.PrimaryGid(uid))
	return loc, nil
}

// spaceAccess checks that a shared space exists (ENOENT) and that the caller
// may read, write and enter it by its owner, group and mode (EACCES).
func (e *Engine) spaceAccess(c layout.Caller, space string) (*unix.Stat_t, error) {
	st, err := e.spaceStat(space)
	if err != nil {
		return nil, err
	}
	if !c.Permits(st.Uid, st.Gid, os.FileMode(st.Mode), 7) { // read, write and enter
		return nil, &abi.Error{Op: "space", Path: space, Errno: syscall.EACCES, Msg: "no access to shared space"}
	}
	return st, nil
}

// spaceStat describes a shared space's directory: ENOENT when there is
// none, an *storefs.UnsafeError (EIO) when something else is there.
func (e *Engine) spaceStat(space string) (*unix.Stat_t, error) {
	rel := layout.SharedHome(space)
	st, err := e.root.Lstat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &abi.Error{Op: "space", Path: space, Errno: syscall.ENOENT, Msg: "no such shared space"}
	}
	if err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		err = &storefs.UnsafeError{Op: "space", Path: e.root.Show(rel), What: storefs.TypeName(st.Mode) + ", not a directory"}
	}
	return st, err
}

// EnsureHome creates home/<uid> in the store on first use, owned by uid,
// 0700. Something other than a directory there is refused (EIO).
func (e *Engine) EnsureHome(uid uint32) error {
	home := layout.PrivateHome(uid)
	if e.isDir(home) {
		return nil
	}
	err := layout.MkdirAll(e.root, home, layout.PrivateOwner(uid, storefs.PrimaryGid(uid)))
	if err == nil {
		err = e.root.SyncDir("home")
	}
	return err
}
