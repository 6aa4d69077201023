package layout

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
	"unsafe"

	"github.com/ctxfs/ctxfs/internal/storefs"
	"golang.org/x/sys/unix"
)

// How the engine writes into the store's shape: directories with their
// owners, derived values swapped in whole, new files synced. Over a
// storefs.Root alone (every path store-relative, no symlink followed).

// MkdirAll creates rel and its missing parents, each owned by own as
// OwnerAt says (history by the server, free trees by own), and syncs
// the parent of each it makes. It is on the send path (the chroot root),
// so an existing directory costs one stat, not a mkdir per component. Something other than a directory on
// the way is an *storefs.UnsafeError.
func MkdirAll(root *storefs.Root, rel string, own storefs.Owner) error {
	if st, err := root.Lstat(rel); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return nil
	}
	cur := ""
	for _, part := range strings.Split(rel, "/") {
		cur = path.Join(cur, part)
		err := root.MkdirOwned(cur, OwnerAt(cur, own))
		if errors.Is(err, fs.ErrExist) {
			if st, err := root.Lstat(cur); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
				return &storefs.UnsafeError{Op: "mkdir", Path: root.Show(cur), What: "not a directory"}
			}
			continue
		}
		if err != nil {
			return err
		}
		// A directory made lasts a crash only once its parent is synced,
		// and what goes into it next (a session moved there, a new
		// session's logs, synced in it) would be lost with its name on a
		// filesystem that does not order its metadata (SPEC 19: any
		// POSIX filesystem). Only a directory made pays it.
		if err := root.SyncDir(path.Dir(cur)); err != nil {
			return err
		}
	}
	return nil
}

// SpareOf is the spare twin of the value file rel (".NAME.spare" beside
// it), which holds its value before the last (ReplaceValue).
func SpareOf(rel string) string {
	dir, name := path.Split(rel)
	return dir + "." + name + ".spare"
}

// ReplaceValue atomically replaces a file the server derives from the logs
// (state, updated_at, latest.md, a send's cwd, snapshots) at every send.
//
// It writes the new value into the file's spare twin (".NAME.spare", a dot
// name the mount never shows) and swaps the two names with one
// renameat2(RENAME_EXCHANGE): readers see the old or the new value, never a
// mix. The twin then holds the old value and is rewritten next time. On a
// filesystem without RENAME_EXCHANGE (storefs.Swap) the twin is renamed
// over the file, as atomic for readers, and made again next time: the
// value is derived, so the old one need not survive. This
// costs a pwrite and a rename, where a temporary file renamed over the
// old one cost far more, several times a send
// (docs/benchmarks.md#derived-values-written-behind). A reader holding the old
// file open across two replacements could see it rewritten, so the FUSE
// layer snapshots these files at open. A spare or a file that is not a
// regular file (planted) is refused, never written through or swapped.
//
// It does not sync: nothing is acknowledged on its strength (the logs are,
// and they are synced). After a power loss such a file may lag the logs;
// loading the session re-derives it (sess.reconcile). mtime, when given,
// is the file's new access and modification time: when the value changed,
// which the engine served before it was written (behind).
func ReplaceValue(root *storefs.Root, rel string, data []byte, own storefs.Owner, mtime *unix.Timespec) error {
	spare := SpareOf(rel)
	f, err := root.OpenFile(spare, os.O_WRONLY|os.O_CREATE, own.FileMode)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(data, 0)
	if err == nil {
		err = f.Truncate(int64(len(data)))
	}
	if err == nil {
		err = f.Chmod(own.FileMode)
	}
	if err == nil {
		err = storefs.Fchown(f, own)
	}
	if err == nil && mtime != nil {
		err = futimens(f, *mtime, *mtime)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := root.Replaceable(rel); err != nil {
		return err // a planted link is left where it is, for fsck to name
	}
	err = root.Swap(spare, rel)
	if errors.Is(err, syscall.ENOENT) { // no old value yet
		err = root.Rename(spare, rel, 0)
	}
	return err
}

// WriteNew creates rel with data, owned by own, and syncs it (for files of
// a directory that is not yet in place, so needs no atomic replace).
func WriteNew(root *storefs.Root, rel string, data []byte, own storefs.Owner) error {
	f, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, own.FileMode)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = storefs.Fchown(f, own)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// futimens sets an open file's access and modification times.
func futimens(f *os.File, atime, mtime unix.Timespec) error {
	ts := [2]unix.Timespec{atime, mtime}
	_, _, errno := unix.Syscall6(unix.SYS_UTIMENSAT, f.Fd(), 0, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
