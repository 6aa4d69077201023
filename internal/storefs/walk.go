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

// walkBelow visits everything below the directory name in dirfd; what
// is gone or replaced meanwhile is passed over.
func walkBelow(dirfd int, name string, visit func(st *unix.Stat_t) bool) error {
	top, more, err := visitLevel(dirfd, name, visit)
	if err != nil {
		return err
	}
	return treeWalk{
		enter: func(dirfd int, name string) (treeLevel, bool, error) {
			return visitLevel(dirfd, name, visit)
		},
		missed: func(int, string, error) error { return nil },
	}.from(dirfd, top, more)
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
