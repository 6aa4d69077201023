package ca

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/storefs"
)

// maxFile bounds what is read of a certificate or key file.
const maxFile = 64 << 10

// privateDir checks that dir is a directory of the server's uid that no
// one else can change, nor any directory above it (the store's rule,
// storefs.OtherWriter), with no symlink on the way, and makes it 0700.
// With create, a missing dir is made (0700) after the directories above
// it passed.
func privateDir(dir string, create bool) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	me := uint32(os.Geteuid())
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) && create {
		if err := walkChecked(dir, me, nil); err != nil {
			return err
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
	}
	found := false
	err = walkChecked(dir, me, func(fd int, st *unix.Stat_t) error {
		found = true
		return ownDir(dir, fd, st, me)
	})
	if err == nil && !found {
		err = fmt.Errorf("cluster directory %s: %w", dir, fs.ErrNotExist)
	}
	return err
}

// walkChecked walks dir without following symlinks: every directory above
// it must pass storefs.OtherWriter; dir itself, when it exists, goes to
// own (nil: not checked).
func walkChecked(dir string, me uint32, own func(fd int, st *unix.Stat_t) error) error {
	return storefs.WalkNoFollow(dir, func(step string, fd int, st *unix.Stat_t) error {
		if step != dir {
			if who := storefs.OtherWriter(st, me); who != "" {
				return &storefs.OpenToOthersError{What: "cluster directory " + dir, Path: step, Who: who}
			}
			return nil
		}
		if own == nil {
			return nil
		}
		return own(fd, st)
	})
}

// ownDir refuses a cluster directory (fd, as walked) that is not mine or
// that someone else can write, and makes it 0700 (it holds keys: no one
// else may even list it).
func ownDir(dir string, fd int, st *unix.Stat_t, me uint32) error {
	if st.Uid != me {
		return &storefs.OpenToOthersError{What: "cluster directory " + dir, Path: dir, Who: fmt.Sprintf("its owner, uid %d", st.Uid)}
	}
	if who := storefs.AnyOtherWriter(st, me); who != "" {
		return &storefs.OpenToOthersError{What: "cluster directory " + dir, Path: dir, Who: who}
	}
	if st.Mode&07777 == 0o700 {
		return nil
	}
	// Through the descriptor: the very directory walked.
	if err := unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), 0o700); err != nil {
		return fmt.Errorf("cluster directory %s: make it 0700: %w", dir, err)
	}
	return nil
}

// writeNew writes data to dir/name, a new file (never one that exists,
// never through a symlink), mode 0600, synced with its directory.
func writeNew(dir, name string, data []byte) error {
	p := filepath.Join(dir, name)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(p) // never a half-written key left to be loaded
		return err
	}
	return syncDir(dir)
}

// syncDir makes dir's entries durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// readPrivate reads dir/name, refusing (EACCES) a symlink, a file that is
// not the server's, or one that anyone else may read or write: a key
// others could read is no secret, a certificate others could write is
// no one's.
func readPrivate(dir, name string) ([]byte, error) {
	p := filepath.Join(dir, name)
	f, st, err := openRegular(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	switch {
	case st.Uid != uint32(os.Geteuid()):
		return nil, &storefs.OpenToOthersError{What: "cluster file " + p, Path: p, Who: fmt.Sprintf("its owner, uid %d", st.Uid)}
	case st.Mode&0o077 != 0:
		return nil, fmt.Errorf("%s: mode %04o, want 0600 (no one else may read a cluster key or change a certificate): %w", p, st.Mode&07777, unix.EACCES)
	}
	return io.ReadAll(io.LimitReader(f, maxFile))
}

// openRegular opens p for reading, never through a symlink at its last
// name, and refuses anything but a regular file (EINVAL).
func openRegular(p string) (*os.File, *unix.Stat_t, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, nil, fmt.Errorf("%s: not a regular file: %w", p, unix.EINVAL)
	}
	return f, &st, nil
}

// replaceFile writes data to dir/name in place of what it held, whole or
// not at all: a new file beside it (writeNew), renamed over it, the
// directory synced. Only the revocation list is ever replaced.
func replaceFile(dir, name string, data []byte) error {
	tmp := name + ".new"
	os.Remove(filepath.Join(dir, tmp)) // left by a write that died: never loaded
	if err := writeNew(dir, tmp, data); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(dir, tmp), filepath.Join(dir, name)); err != nil {
		os.Remove(filepath.Join(dir, tmp))
		return err
	}
	return syncDir(dir)
}

// readNoFollow reads a regular file the admin names (never through a
// symlink at its last name), at most maxFile bytes.
func readNoFollow(p string) ([]byte, error) {
	f, _, err := openRegular(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxFile))
}

// lockDir holds an exclusive flock on dir until unlock is called.
func lockDir(dir string) (unlock func(), err error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil {
		d.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return func() { d.Close() }, nil
}
