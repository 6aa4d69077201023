package index

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/google/renameio/v2"

	"github.com/ctxfs/ctxfs/abi"
)

// maxValueBytes bounds what is read of a value file: a valid value is at
// most a 64-byte name and a newline, so anything longer is garbage anyway.
const maxValueBytes = 256

// ParseValue checks a single value as written through the mount ("name" or
// "name\n": exactly one line holding a valid session name) and returns the
// name; EINVAL otherwise.
func ParseValue(data []byte) (string, error) {
	if len(data) > maxValueBytes {
		return "", abi.Errorf(syscall.EINVAL, "", "index value too long (%d bytes)", len(data))
	}
	s := string(data)
	if n := len(s); n > 0 && s[n-1] == '\n' {
		s = s[:n-1]
	}
	// ValidSessionName rejects any further newline, so this is one line.
	if !abi.ValidSessionName(s) {
		return "", abi.Errorf(syscall.EINVAL, "", "invalid session name %q", s)
	}
	return s, nil
}

// readValue reads a single-value file of the store. ok is false when it does
// not exist; err reports one that is not a regular file or holds no valid
// name, so a hand-edited file is never trusted.
func readValue(p string) (name string, ok bool, err error) {
	data, err := readRegular(p, maxValueBytes+1)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	name, err = ParseValue(data)
	return name, err == nil, err
}

// readRegular reads at most limit bytes of the regular file p. O_NOFOLLOW:
// index files are never symlinks, and one must not lead the server to read
// a file elsewhere; O_NONBLOCK: a FIFO planted there must not hang Load.
func readRegular(p string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, abi.Errorf(syscall.EINVAL, "", "not a regular file")
	}
	return io.ReadAll(io.LimitReader(f, limit))
}

// writeFile replaces p atomically with data: a temporary file in the same
// directory, 0600, chowned, fsynced, then renamed over p. Readers see the
// old or the new content, never a mix, and never a symlink.
func (x *Index) writeFile(p string, data []byte) error {
	t, err := renameio.NewPendingFile(p,
		renameio.WithTempDir(filepath.Dir(p)),
		renameio.WithStaticPermissions(0o600))
	if err != nil {
		return err
	}
	defer t.Cleanup()
	if _, err := t.Write(data); err != nil {
		return err
	}
	if err := permitted(t.Chown(x.uid, x.gid)); err != nil {
		return err
	}
	return t.CloseAtomicallyReplace()
}

// writeSnapshot replaces p atomically like writeFile but without fsync: the
// list snapshot is never trusted (Load rebuilds the order and rewrites a
// snapshot that does not match), so it need not survive a crash, and an
// fsync of a 100,000-line file each second would stall the journal that
// sends fsync through.
func (x *Index) writeSnapshot(p string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p))
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // fails harmlessly once renamed
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o600) // CreateTemp makes 0600 less umask; be exact
	}
	if err == nil {
		err = permitted(f.Chown(x.uid, x.gid))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), p)
}

// mkdir creates a directory of the index (0700, chowned) or checks that the
// existing one is a real directory, not a symlink or a file.
func (x *Index) mkdir(p string) error {
	err := os.Mkdir(p, 0o700)
	if err == nil {
		return ioErrIf("load", p, permitted(os.Lchown(p, x.uid, x.gid)))
	}
	if !errors.Is(err, fs.ErrExist) {
		return ioErr("load", p, err)
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return ioErr("load", p, err)
	}
	if !fi.IsDir() {
		return abi.Errorf(syscall.ENOTDIR, "load", "%s is not a directory", p)
	}
	return nil
}

// permitted drops the EPERM of a chown by a non-root server: it can only
// give files to itself, and they are already its own.
func permitted(err error) error {
	if errors.Is(err, syscall.EPERM) && os.Geteuid() != 0 {
		return nil
	}
	return err
}

// removeFile unlinks p; one already gone is fine (Remove may be retried).
func removeFile(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// ioErr turns any error into an *abi.Error naming op and path, keeping the
// errno (EIO for errors that carry none).
func ioErr(op, p string, err error) *abi.Error {
	var ae *abi.Error
	if errors.As(err, &ae) {
		c := *ae
		c.Op, c.Path = op, p
		return &c
	}
	msg := err.Error()
	var pe *fs.PathError
	if errors.As(err, &pe) {
		msg = pe.Err.Error() // the path is already in Path
	}
	return &abi.Error{Op: op, Path: p, Errno: abi.Errno(err), Msg: msg}
}

// ioErrIf is ioErr that passes nil through (a nil *abi.Error in an error
// interface would not be nil).
func ioErrIf(op, p string, err error) error {
	if err == nil {
		return nil
	}
	return ioErr(op, p, err)
}
