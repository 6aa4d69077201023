package storefs

import (
	"errors"
	"io/fs"

	"golang.org/x/sys/unix"
)

// RemoveAll removes rel and everything below it, links as links. What is
// already gone is fine.
//
// It walks by descriptors, not by paths: a tree may be deeper than a path
// can name (PATH_MAX). A user's context/ filled up to that length where
// the session lived is longer than it once its session is moved aside
// to be deleted (session/archive.Remove), and a removal by paths then
// failed with ENAMETOOLONG half way, the session gone from view and its
// delete refused. One directory is held open at a time: going back up,
// ".." must be the directory that was left (its device and inode), else
// the removal stops (something moved the tree meanwhile).
func (r *Root) RemoveAll(rel string) error {
	if err := r.gated("remove", rel); err != nil {
		return err
	}
	dirfd, name, done, err := r.parent("remove", rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer done()
	return r.fail("remove", rel, r.do(func() error { return r.removeAt(dirfd, name) }))
}

// treeLevel is a directory of the tree being removed: its identity, its
// name in its parent, and the subdirectories it still holds.
type treeLevel struct {
	fd      int // open for the level being emptied only, else -1
	dev     uint64
	ino     uint64
	name    string
	subdirs []string
}

// removeAt removes name in dirfd and everything below it.
func (r *Root) removeAt(dirfd int, name string) error {
	top, err := openLevel(dirfd, name)
	if err == unix.ENOENT {
		return nil
	}
	if err == unix.ENOTDIR || err == unix.ELOOP { // a file, or a link
		return gone(unix.Unlinkat(dirfd, name, 0))
	}
	if err != nil {
		return err
	}
	return treeWalk{
		step: func() error { return r.gated("remove", "") },
		enter: func(dirfd int, name string) (treeLevel, bool, error) {
			l, err := openLevel(dirfd, name)
			return l, true, err
		},
		missed: func(dirfd int, name string, err error) error {
			if err == unix.ENOENT {
				return nil
			}
			return gone(unix.Unlinkat(dirfd, name, 0)) // became a file or a link
		},
		leave: func(dirfd int, name string) error {
			return gone(unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR))
		},
	}.from(dirfd, top, true)
}

// treeWalk walks a directory tree down and back up by descriptors (the
// walk of RemoveAll and of WalkTree), one directory open at a time.
type treeWalk struct {
	step   func() error // before each step, if set: an error stops the walk
	enter  func(dirfd int, name string) (l treeLevel, more bool, err error)
	missed func(dirfd int, name string, err error) error // a subdirectory gone (ENOENT) or no longer one (ENOTDIR, ELOOP)
	leave  func(dirfd int, name string) error            // if set: the level name, done, from its parent dirfd
}

// from walks below top, the level entered as name in dirfd; more false
// (enter said to stop) ends the walk. Going up, ".." must be the level
// left on the way down (openParent), else the walk stops with EXDEV.
func (w treeWalk) from(dirfd int, top treeLevel, more bool) error {
	cur := top
	var above []treeLevel // the levels left on the way down, closed
	defer func() { unix.Close(cur.fd) }()
	for more {
		if w.step != nil {
			if err := w.step(); err != nil {
				return err
			}
		}
		if n := len(cur.subdirs); n > 0 {
			sub := cur.subdirs[n-1]
			cur.subdirs = cur.subdirs[:n-1]
			next, goOn, err := w.enter(cur.fd, sub)
			switch {
			case err == unix.ENOENT || err == unix.ENOTDIR || err == unix.ELOOP:
				if err := w.missed(cur.fd, sub, err); err != nil {
					return err
				}
				continue
			case err != nil:
				return err
			}
			unix.Close(cur.fd)
			cur.fd = -1
			above = append(above, cur)
			cur, more = next, goOn
			continue
		}
		if len(above) == 0 {
			return w.left(dirfd, top.name)
		}
		parent := above[len(above)-1]
		up, err := openParent(cur.fd, parent)
		if err != nil {
			return err
		}
		unix.Close(cur.fd)
		left := cur.name
		cur, above = parent, above[:len(above)-1]
		cur.fd = up
		if err := w.left(cur.fd, left); err != nil {
			return err
		}
	}
	return nil
}

// left calls leave, if set.
func (w treeWalk) left(dirfd int, name string) error {
	if w.leave == nil {
		return nil
	}
	return w.leave(dirfd, name)
}

// openLevel opens the directory name in dirfd (never through a link) and
// removes its files, links and other non-directories; the level lists the
// subdirectories left.
func openLevel(dirfd int, name string) (treeLevel, error) {
	l, ents, err := openTreeDir(dirfd, name)
	if err != nil {
		return l, err
	}
	for _, e := range ents {
		if e.Type == unix.DT_DIR || e.Type == unix.DT_UNKNOWN {
			l.subdirs = append(l.subdirs, e.Name) // openLevel tells an unknown one
			continue
		}
		if err := gone(unix.Unlinkat(l.fd, e.Name, 0)); err != nil {
			unix.Close(l.fd)
			return treeLevel{fd: -1}, err
		}
	}
	return l, nil
}

// openTreeDir opens the directory name in dirfd (never through a link)
// as a level of a walk, and lists it.
func openTreeDir(dirfd int, name string) (treeLevel, []Entry, error) {
	how := &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: resolve}
	fd, err := unix.Openat2(dirfd, name, how)
	for i := 0; err == unix.EAGAIN && i < 64; i++ {
		fd, err = unix.Openat2(dirfd, name, how)
	}
	if err != nil {
		return treeLevel{fd: -1}, nil, err
	}
	var st unix.Stat_t
	ents, err := listFd(fd)
	if err == nil {
		err = unix.Fstat(fd, &st)
	}
	if err != nil {
		unix.Close(fd)
		return treeLevel{fd: -1}, nil, err
	}
	return treeLevel{fd: fd, dev: st.Dev, ino: st.Ino, name: name}, ents, nil
}

// listFd lists the directory open as fd.
func listFd(fd int) ([]Entry, error) {
	var ents []Entry
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return ents, nil
		}
		ents = parseDirents(buf[:n], ents)
	}
}

// openParent opens ".." of the directory fd, which must be the level
// want (the directory the walk came down from): EXDEV otherwise, as a
// walk that would leave the store.
func openParent(fd int, want treeLevel) (int, error) {
	up, err := unix.Openat(fd, "..", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(up, &st); err != nil || st.Dev != want.dev || st.Ino != want.ino {
		unix.Close(up)
		if err == nil {
			err = unix.EXDEV
		}
		return -1, err
	}
	return up, nil
}

// gone is err, but nil for a name that is gone already.
func gone(err error) error {
	if err == unix.ENOENT {
		return nil
	}
	return err
}
