package storefs

import (
	"golang.org/x/sys/unix"
)

// WalkTree calls visit with what rel is (not followed) and with each name
// below it, a directory before what it holds, until visit returns false.
// Like RemoveAll it walks by descriptors, one directory open at a time
// ("..", going up, must be the directory left: EXDEV otherwise), so that
// nothing deeper than a path can name is left out: a user's free tree can
// hold such a tree (a directory moved below a deep one), which a walk by
// paths (the free trees' count for the quota) did not see.
func (r *Root) WalkTree(rel string, visit func(st *unix.Stat_t) bool) error {
	dirfd, name, done, err := r.parent("walk", rel)
	if err != nil {
		return err
	}
	defer done()
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return r.fail("walk", rel, err)
	}
	if !visit(&st) || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil
	}
	return r.fail("walk", rel, walkBelow(dirfd, name, visit))
}

// walkBelow visits everything below the directory name in dirfd.
func walkBelow(dirfd int, name string, visit func(st *unix.Stat_t) bool) error {
	cur, more, err := visitLevel(dirfd, name, visit)
	if err != nil {
		return err
	}
	var above []treeLevel // the levels left on the way down, closed
	defer func() { unix.Close(cur.fd) }()
	for more {
		if n := len(cur.subdirs); n > 0 {
			sub := cur.subdirs[n-1]
			cur.subdirs = cur.subdirs[:n-1]
			next, goOn, err := visitLevel(cur.fd, sub, visit)
			switch {
			case err == unix.ENOENT || err == unix.ENOTDIR || err == unix.ELOOP:
				continue // gone, or replaced meanwhile
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
			return nil
		}
		up, err := openParent(cur.fd, above[len(above)-1])
		if err != nil {
			return err
		}
		unix.Close(cur.fd)
		cur, above = above[len(above)-1], above[:len(above)-1]
		cur.fd = up
	}
	return nil
}

// visitLevel opens the directory name in dirfd and visits what it holds;
// the level lists its subdirectories, and more is false once visit said
// to stop.
func visitLevel(dirfd int, name string, visit func(st *unix.Stat_t) bool) (l treeLevel, more bool, err error) {
	l, ents, err := openTreeDir(dirfd, name)
	if err != nil {
		return l, false, err
	}
	for _, e := range ents {
		var st unix.Stat_t
		if err := unix.Fstatat(l.fd, e.Name, &st, unix.AT_SYMLINK_NOFOLLOW); err == unix.ENOENT {
			continue
		} else if err != nil {
			unix.Close(l.fd)
			return treeLevel{fd: -1}, false, err
		}
		if !visit(&st) {
			return l, false, nil
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			l.subdirs = append(l.subdirs, e.Name)
		}
	}
	return l, true, nil
}
