package storefs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// OpenPrivate creates the store directory at path when it is missing
// (0700), makes sure it is the server's alone (Secure), and opens it.
func OpenPrivate(path string) (*Root, error) {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		// Check where it would go before making anything there.
		parent, err := filepath.EvalSymlinks(filepath.Dir(path))
		if err == nil {
			err = checkParents(path, parent, uint32(os.Geteuid()))
		}
		if err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, err
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
// data only through the mount and the sockets. Every directory above it,
// symlinks resolved, must belong to root or to the server's uid and be
// writable by no one else, unless it is sticky (as /tmp is: others may not
// rename or remove what they do not own there). Otherwise a user could
// swap the store, or a directory above it, for one of their own.
func Secure(path string) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fmt.Errorf("store %s: %w", path, err)
	}
	me := uint32(os.Geteuid())
	var st unix.Stat_t
	if err := unix.Lstat(real, &st); err != nil {
		return fmt.Errorf("store %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("store %s is not a directory", path)
	}
	if st.Uid != me {
		return fmt.Errorf("store %s belongs to uid %d, not to the server's uid %d: anything in it may have been planted by that user; "+
			"use a new store, or check it and run: chown -R %d %s && ctxfs fsck --store %s", path, st.Uid, me, me, real, real)
	}
	if st.Mode&07777 != 0o700 {
		if err := unix.Chmod(real, 0o700); err != nil {
			return fmt.Errorf("store %s: make it 0700: %w", path, err)
		}
	}
	return checkParents(path, filepath.Dir(real), me)
}

// checkParents checks dir and every directory above it (real paths) for
// anyone besides root and me who could change their entries.
func checkParents(path, dir string, me uint32) error {
	var st unix.Stat_t
	for ; ; dir = filepath.Dir(dir) {
		if err := unix.Lstat(dir, &st); err != nil {
			return fmt.Errorf("store %s: %s: %w", path, dir, err)
		}
		if who := OtherWriter(&st, me); who != "" {
			return fmt.Errorf("store %s: %s is writable by %s, who could replace the store; "+
				"keep the store below directories only root can change (as /var/lib/ctxfs is), or run: chown root %s && chmod go-w %s",
				path, dir, who, dir, dir)
		}
		if dir == "/" {
			return nil
		}
	}
}

// OtherWriter names who besides root and me can change entries of the
// directory st describes ("" when no one): the rule the server holds the
// directories above its store to, and that ctx doctor reports on.
func OtherWriter(st *unix.Stat_t, me uint32) string {
	if st.Uid != 0 && st.Uid != me {
		return fmt.Sprintf("its owner, uid %d", st.Uid)
	}
	if st.Mode&unix.S_ISVTX != 0 {
		return "" // sticky: others may not rename or remove our entry
	}
	switch {
	case st.Mode&0o002 != 0:
		return "every user"
	case st.Mode&0o020 != 0:
		return fmt.Sprintf("the members of group %d", st.Gid)
	}
	return ""
}
