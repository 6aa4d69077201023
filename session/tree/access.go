package tree

import (
	"os"
	"path"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/session/layout"
)

// A host that relays a change on behalf of a caller it vouches for
// (cluster/) reaches the engine without a kernel in between: the writer
// checks with these what its own kernel would check for its own mount's
// callers (default_permissions), on the tree as the mount shows it to the
// caller. ENOENT where the caller's mount shows no such name, EACCES
// where a permission bit is missing, EPERM where a sticky directory
// keeps a name from the caller.

// MayWrite is the kernel's check of caller c opening rel for writing:
// every directory on the way searchable by c, and the file writable by
// c, a virtual file (ctl, an index value) by its directory's owner and
// group with the bits the mount shows it with (layout.VirtualPerm of the
// directory's mode), any other file by its own.
func (t Tree) MayWrite(c layout.Caller, rel string) error {
	_, n, err := t.reach(c, rel)
	switch {
	case err != nil:
		return err
	case n.Dir:
		return abi.Errorf(syscall.EISDIR, "open", "%s is a directory", rel)
	case !c.Permits(n.Stat.Uid, n.Stat.Gid, shownMode(n), 2):
		return abi.Errorf(syscall.EACCES, "open", "%s is not writable by uid %d", rel, c.Uid)
	}
	return nil
}

// MayCreate is the kernel's check of caller c making the name rel (mkdir,
// an open with O_CREAT of a name not there): every directory on the way
// searchable, and rel's directory writable, by c.
func (t Tree) MayCreate(c layout.Caller, rel string) error {
	dir, err := t.searchable(c, rel)
	if err != nil {
		return err
	}
	return mayChange(c, dir, rel)
}

// MayRemove is the kernel's check of caller c removing the name rel
// (unlink): MayCreate's, and in a sticky directory c must own the name or
// the directory (root passes).
func (t Tree) MayRemove(c layout.Caller, rel string) error {
	_, err := t.mayRemove(c, rel)
	return err
}

// MayRename is the kernel's check of caller c moving oldRel to newRel:
// oldRel removable from its directory, newRel creatable in its own, and a
// directory moved to another directory writable itself (its ".." changes).
func (t Tree) MayRename(c layout.Caller, oldRel, newRel string) error {
	n, err := t.mayRemove(c, oldRel)
	if err != nil {
		return err
	}
	if err := t.MayCreate(c, newRel); err != nil {
		return err
	}
	if n.Dir && path.Dir(oldRel) != path.Dir(newRel) && !c.Permits(n.Stat.Uid, n.Stat.Gid, os.FileMode(n.Stat.Mode), 2) {
		return abi.Errorf(syscall.EACCES, "rename", "%s is not writable by uid %d", oldRel, c.Uid)
	}
	return nil
}

// MaySetattr is the kernel's check of caller c changing rel's attributes
// (chmod, chown, truncate, touch): a mode is its owner's to change, an
// owner root's, a group its owner's to one of the owner's groups, a size
// needs the file writable, times given their owner's and the present any
// writer's (EPERM, EACCES; root passes).
func (t Tree) MaySetattr(c layout.Caller, rel string, a SetAttr) error {
	_, n, err := t.reach(c, rel)
	if err != nil {
		return err
	}
	owner := c.Uid == 0 || c.Uid == n.Stat.Uid
	writer := c.Permits(n.Stat.Uid, n.Stat.Gid, shownMode(n), 2)
	switch {
	case a.Mode != nil && !owner,
		a.Uid != nil && *a.Uid != n.Stat.Uid && c.Uid != 0,
		a.Gid != nil && *a.Gid != n.Stat.Gid && !(c.Uid == 0 || owner && c.InGroup(*a.Gid)),
		a.Times != nil && !a.Now && !owner:
		return abi.Errorf(syscall.EPERM, "setattr", "uid %d may not change these attributes of %s", c.Uid, rel)
	case a.Times != nil && a.Now && !owner && !writer,
		a.Size != nil && !writer:
		return abi.Errorf(syscall.EACCES, "setattr", "%s is not writable by uid %d", rel, c.Uid)
	}
	return nil
}

// mayRemove is MayRemove, returning rel's node.
func (t Tree) mayRemove(c layout.Caller, rel string) (Node, error) {
	dir, n, err := t.reach(c, rel)
	if err == nil {
		err = mayChange(c, dir, rel)
	}
	if err != nil {
		return Node{}, err
	}
	if dir.Stat.Mode&syscall.S_ISVTX != 0 && c.Uid != 0 && c.Uid != dir.Stat.Uid && c.Uid != n.Stat.Uid {
		return Node{}, abi.Errorf(syscall.EPERM, "unlink", "%s is in a sticky directory and not uid %d's", rel, c.Uid)
	}
	return n, nil
}

// mayChange is the kernel's check of caller c changing the names of dir
// (rel's directory): writable and searchable.
func mayChange(c layout.Caller, dir Node, rel string) error {
	if !c.Permits(dir.Stat.Uid, dir.Stat.Gid, os.FileMode(dir.Stat.Mode), 3) {
		return abi.Errorf(syscall.EACCES, "create", "%s is not writable by uid %d", path.Dir(rel), c.Uid)
	}
	return nil
}

// shownMode is the permission bits the mount shows n with: a virtual
// file's are its directory's limited to layout.VirtualPerm.
func shownMode(n Node) os.FileMode {
	if n.Virtual {
		return os.FileMode(n.Stat.Mode) & layout.VirtualPerm(n.Place)
	}
	return os.FileMode(n.Stat.Mode)
}

// reach is rel's node and its directory's, every directory on the way
// searchable by c.
func (t Tree) reach(c layout.Caller, rel string) (dir, n Node, err error) {
	if dir, err = t.searchable(c, rel); err != nil {
		return Node{}, Node{}, err
	}
	n, err = t.Lookup(c.Uid, rel)
	return dir, n, err
}

// searchable checks every directory on the way to rel searchable by c,
// and returns the last (rel's own directory).
func (t Tree) searchable(c layout.Caller, rel string) (Node, error) {
	var dir Node
	for i := range len(rel) {
		if rel[i] != '/' {
			continue
		}
		n, err := t.Lookup(c.Uid, rel[:i])
		if err != nil {
			return Node{}, err
		}
		if !n.Dir {
			return Node{}, abi.Errorf(syscall.ENOTDIR, "open", "%s is not a directory", rel[:i])
		}
		if !c.Permits(n.Stat.Uid, n.Stat.Gid, os.FileMode(n.Stat.Mode), 1) {
			return Node{}, abi.Errorf(syscall.EACCES, "open", "no search permission on %s", rel[:i])
		}
		dir = n
	}
	if !dir.Dir {
		return Node{}, abi.Errorf(syscall.EINVAL, "open", "%q is no path of the tree", rel)
	}
	return dir, nil
}
