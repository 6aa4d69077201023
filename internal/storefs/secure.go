package storefs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// OpenPrivate creates the store directory at path when it is missing
// (0700), makes sure it is the server's alone (Secure), and opens it.
func OpenPrivate(path string) (*Root, error) {
	me := uint32(os.Geteuid())
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		// Check where it would go before making anything there.
		if err := checkAbove("store", path, me); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(path, 0o700); err != nil {
			return nil, err
		}
	}
	if err := Secure(path); err != nil {
		return nil, err
	}
	return Open(path)
}

// Secure makes the store at path the server's alone and refuses a store
// that anyone else could change behind the server's back.
//
// The store directory itself must belong to the server's uid and is made
// 0700 (also when it already existed with a wider mode): users reach their
// data only through the mount and the sockets. Every directory above it
// must belong to root or to the server's uid and be writable by no one
// else, unless it is sticky (as /tmp is: others may not rename or remove
// what they do not own there). Otherwise a user could swap the store, or a
// directory above it, for one of their own. No symlink is followed on the
// way (WalkNoFollow): a store path through one is refused, and the link's
// target is never touched.
func Secure(path string) error { return secure(path, true) }

// CheckPrivate is Secure that changes nothing: for a follower, which
// reads a store another server writes and keeps 0700; a store of any
// other mode is refused, never narrowed.
func CheckPrivate(path string) error { return secure(path, false) }

func secure(path string, fix bool) error {
	me := uint32(os.Geteuid())
	path = filepath.Clean(path)
	found := false
	err := named("store "+path, WalkNoFollow(path, func(dir string, fd int, st *unix.Stat_t) error {
		if dir != path {
			return aboveOK("store", path, dir, st, me)
		}
		found = true
		return ownStore(path, fd, st, me, fix)
	}))
	if err == nil && !found {
		err = fmt.Errorf("store %s: %w", path, fs.ErrNotExist)
	}
	return err
}

// ownStore refuses a store directory (fd, as walked) that is not mine,
// and makes it 0700 (fix), or refuses it unless it is.
func ownStore(path string, fd int, st *unix.Stat_t, me uint32, fix bool) error {
	if st.Uid != me {
		return fmt.Errorf("store %s belongs to uid %d, not to the server's uid %d: anything in it may have been planted by that user; "+
			"use a new store, or check it and run: chown -R %d %s && ctxfs fsck --store %s", path, st.Uid, me, me, path, path)
	}
	if st.Mode&07777 == 0o700 {
		return nil
	}
	if !fix {
		return fmt.Errorf("store %s: mode %#o, not 0700: its server makes it 0700", path, st.Mode&07777)
	}
	// Through the descriptor's magic link: the very directory walked,
	// whatever is at path by now (a path chmod would follow a symlink).
	if err := unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), 0o700); err != nil {
		return fmt.Errorf("store %s: make it 0700: %w", path, err)
	}
	return nil
}

// checkAbove checks every existing directory above path (what, e.g.
// "store", names it in errors) with aboveOK.
func checkAbove(what, path string, me uint32) error {
	path = filepath.Clean(path)
	return named(what+" "+path, WalkNoFollow(path, func(dir string, _ int, st *unix.Stat_t) error {
		if dir == path {
			return nil
		}
		return aboveOK(what, path, dir, st, me)
	}))
}

// aboveOK refuses a directory above path that anyone besides root and me
// could change the entries of; sticky ones are fine (OtherWriter).
func aboveOK(what, path, dir string, st *unix.Stat_t, me uint32) error {
	if who := OtherWriter(st, me); who != "" {
		return &OpenToOthersError{What: what + " " + path, Path: dir, Who: who}
	}
	return nil
}

// WalkNoFollow opens the absolute path one component at a time from "/",
// each step with O_PATH|O_NOFOLLOW relative to the one before, and calls
// visit for each directory on the way, path's own included, with that
// step's descriptor (valid during the call) and stat. A symlink at any
// step is refused (its target is never opened), and so is a step that is
// not a directory; the walk ends quietly at the first component that does
// not exist, since a path being made is checked where it would go.
func WalkNoFollow(path string, visit func(dir string, fd int, st *unix.Stat_t) error) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("%s is not an absolute path", path)
	}
	path = filepath.Clean(path)
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer func() { unix.Close(fd) }()
	dir := "/"
	for _, name := range append([]string{""}, strings.Split(path, "/")[1:]...) {
		if name != "" {
			next, err := unix.Openat(fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("%s: %w", filepath.Join(dir, name), err)
			}
			unix.Close(fd)
			fd, dir = next, filepath.Join(dir, name)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
		if err := stepIsDir(path, dir, &st); err != nil {
			return err
		}
		if err := visit(dir, fd, &st); err != nil {
			return err
		}
	}
	return nil
}

// stepIsDir refuses a step of path's walk that is a symlink or no
// directory, naming the real path to use instead when there is one.
func stepIsDir(path, dir string, st *unix.Stat_t) error {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return nil
	case unix.S_IFLNK:
		hint := ""
		if real, err := filepath.EvalSymlinks(path); err == nil {
			hint = "; name the real directory instead: " + real
		}
		return &SymlinkError{Path: path, Link: dir, Hint: hint}
	}
	return fmt.Errorf("%s: %s is not a directory", path, dir)
}

// SymlinkError is a path refused because a step of it is a symlink: a
// link in a place others can change could be turned anywhere, and the
// server never acts on what a link points to.
type SymlinkError struct {
	What string // what was checked, e.g. "store /var/lib/ctxfs" (named); else Path
	Path string // the path walked
	Link string // the symlink on it
	Hint string // "; name the real directory instead: …", or ""
}

func (e *SymlinkError) Error() string {
	what := e.What
	if what == "" {
		what = e.Path
	}
	return fmt.Sprintf("%s: %s is a symlink, which ctxfs does not follow%s", what, e.Link, e.Hint)
}

// named has a *SymlinkError say what was checked (what, e.g. "store
// /var/lib/ctxfs"); other errors are returned as they are.
func named(what string, err error) error {
	var link *SymlinkError
	if errors.As(err, &link) {
		link.What = what
	}
	return err
}

func (e *SymlinkError) Unwrap() error { return unix.ELOOP }

// OtherWriter names who besides root and me can change entries of the
// directory st describes ("" when no one): the rule the server holds the
// directories above its store and its mount root to, and that ctx doctor
// reports on. A sticky directory is fine (others may not rename or remove
// our entry there) as long as root or I own it.
func OtherWriter(st *unix.Stat_t, me uint32) string { return otherWriter(st, me, true) }

// AnyOtherWriter is OtherWriter without the sticky exception: for what
// must take no one else's entries at all (the mount root, its agent/ and
// model/ directories, a definition and its files).
func AnyOtherWriter(st *unix.Stat_t, me uint32) string { return otherWriter(st, me, false) }

func otherWriter(st *unix.Stat_t, me uint32, stickyOK bool) string {
	if st.Uid != 0 && st.Uid != me {
		return fmt.Sprintf("its owner, uid %d", st.Uid)
	}
	if stickyOK && st.Mode&unix.S_ISVTX != 0 {
		return ""
	}
	switch {
	case st.Mode&0o002 != 0:
		return "every user"
	case st.Mode&0o020 != 0:
		return fmt.Sprintf("the members of group %d", st.Gid)
	}
	return ""
}
