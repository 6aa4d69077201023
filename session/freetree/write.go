package freetree

import (
	"errors"
	"os"
	"path"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/session/layout"
)

// MkdirAll makes rel and the directories above it that are missing, down
// from top (which must exist), for c, each charged as Mkdir is. A name on
// the way that is there but is not a directory (a symlink a user left)
// is ENOTDIR: nothing is followed.
func (t Tree) MkdirAll(c layout.Caller, top, rel string, perm os.FileMode) error {
	if rel == top {
		return nil
	}
	if err := t.MkdirAll(c, top, path.Dir(rel), perm); err != nil {
		return err
	}
	err := t.Mkdir(c, rel, perm)
	if !errors.Is(err, os.ErrExist) {
		return err
	}
	st, lerr := t.Lstat(rel)
	if lerr != nil {
		return lerr
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return abi.Errorf(syscall.ENOTDIR, "mkdir", "%s is not a directory", rel)
	}
	return nil
}

// WriteFile replaces the content of the regular file rel with data, for c
// (made with perm when missing; charged as Create and Write are). A
// symlink there is not followed (the store's door refuses it), and a
// FIFO or device a user left there is refused (EINVAL) without blocking.
func (t Tree) WriteFile(c layout.Caller, rel string, data []byte, perm os.FileMode) error {
	f, err := t.Create(c, rel, os.O_WRONLY|syscall.O_NONBLOCK, perm)
	if err != nil {
		return err
	}
	defer f.OS().Close()
	if st, err := f.OS().Stat(); err != nil || !st.Mode().IsRegular() {
		return abi.Errorf(syscall.EINVAL, "write", "%s is not a regular file", rel)
	}
	if err := f.Resize(0); err != nil {
		return err
	}
	return f.Write(0, len(data), func() error {
		_, err := f.OS().WriteAt(data, 0)
		return err
	})
}

// WriteFileAll is WriteFile (mode 0600) after MkdirAll of rel's directory
// (mode 0700) below top.
func (t Tree) WriteFileAll(c layout.Caller, top, rel string, data []byte) error {
	if err := t.MkdirAll(c, top, path.Dir(rel), 0o700); err != nil {
		return err
	}
	return t.WriteFile(c, rel, data, 0o600)
}
