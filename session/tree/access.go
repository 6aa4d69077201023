package tree

import (
	"os"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/session/layout"
)

// MayWrite is the kernel's check (the mount's default_permissions) of
// caller c opening rel for writing, on the tree as the mount shows it to
// c: every directory on the way searchable by c, and the file writable by
// c, a ctl file by its session directory's owner and group with the read
// and write bits the mount shows it with (layout.CtlPerm of the
// directory's mode), any other file by its own. ENOENT where c's mount shows no such
// name, EACCES where a permission bit is missing; a virtual file other
// than ctl is never written (EACCES). A host that relays a write on
// behalf of a caller it vouches for (cluster/) checks with this what its
// own kernel would check, since the relay reaches the engine without a
// kernel in between.
func (t Tree) MayWrite(c layout.Caller, rel string) error {
	for i := range len(rel) {
		if rel[i] != '/' {
			continue
		}
		dir := rel[:i]
		n, err := t.Lookup(c.Uid, dir)
		if err != nil {
			return err
		}
		if !n.Dir {
			return abi.Errorf(syscall.ENOTDIR, "open", "%s is not a directory", dir)
		}
		if !c.Permits(n.Stat.Uid, n.Stat.Gid, os.FileMode(n.Stat.Mode), 1) {
			return abi.Errorf(syscall.EACCES, "open", "no search permission on %s", dir)
		}
	}
	n, err := t.Lookup(c.Uid, rel)
	if err != nil {
		return err
	}
	shown := os.FileMode(0o777)
	switch {
	case n.Dir:
		return abi.Errorf(syscall.EISDIR, "open", "%s is a directory", rel)
	case n.Place.Kind == layout.PlaceCtl:
		shown = layout.CtlPerm
	case n.Virtual:
		return abi.Errorf(syscall.EACCES, "open", "%s is not written", rel)
	}
	if !c.Permits(n.Stat.Uid, n.Stat.Gid, os.FileMode(n.Stat.Mode)&shown, 2) {
		return abi.Errorf(syscall.EACCES, "open", "%s is not writable by uid %d", rel, c.Uid)
	}
	return nil
}
