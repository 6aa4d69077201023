package session

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/layout"
)

// The engine reaches its store only through e.root (package storefs):
// store-relative paths, walked without following any symlink. This file
// holds the few shapes in which the engine writes.

// mkdirAll creates rel and its missing parents, each owned by own as
// layout.OwnerAt says (history by the server, free trees by own). It is
// on the send path (the chroot root), so an existing directory costs one
// stat, not a mkdir per component. Something other than a directory on
// the way is an *storefs.UnsafeError.
func (e *Engine) mkdirAll(rel string, own storefs.Owner) error {
	if st, err := e.root.Lstat(rel); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return nil
	}
	cur := ""
	for _, part := range strings.Split(rel, "/") {
		cur = path.Join(cur, part)
		err := e.root.MkdirOwned(cur, layout.OwnerAt(cur, own))
		if errors.Is(err, fs.ErrExist) {
			if st, err := e.root.Lstat(cur); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
				return &storefs.UnsafeError{Op: "mkdir", Path: e.root.Show(cur), What: "not a directory"}
			}
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// writeValue atomically and durably replaces a single-value file a user
// wrote through the mount: synced before the close that wrote it returns.
func (e *Engine) writeValue(rel string, data []byte, own storefs.Owner) error {
	return e.root.ReplaceFile(rel, data, own, storefs.SyncAll)
}

// replaceValue atomically replaces a file the server derives from the logs
// (state, updated_at, latest.md, a send's cwd, snapshots) at every send.
//
// It writes the new value into the file's spare twin (".NAME.spare", a dot
// name the mount never shows) and swaps the two names with one
// renameat2(RENAME_EXCHANGE): readers see the old or the new value, never a
// mix. The twin then holds the old value and is rewritten next time. This
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
func (e *Engine) replaceValue(rel string, data []byte, own storefs.Owner, mtime *unix.Timespec) error {
	dir, name := path.Split(rel)
	spare := dir + "." + name + ".spare"
	f, err := e.root.OpenFile(spare, os.O_WRONLY|os.O_CREATE, own.FileMode)
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
	if err := e.root.Replaceable(rel); err != nil {
		return err // a planted link is left where it is, for fsck to name
	}
	err = e.root.Rename(spare, rel, unix.RENAME_EXCHANGE)
	if errors.Is(err, syscall.ENOENT) { // no old value yet
		err = e.root.Rename(spare, rel, 0)
	}
	return err
}

// writeNew creates rel with data, owned by own, and syncs it (for files of
// a directory that is not yet in place, so needs no atomic replace).
func (e *Engine) writeNew(rel string, data []byte, own storefs.Owner) error {
	f, err := e.root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, own.FileMode)
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

// readValue reads a single-value file and strips one trailing newline.
// A derived value not yet written is read from memory (behind).
func (e *Engine) readValue(rel string) (string, error) {
	b, err := e.readFile(rel, layout.MaxValueFile)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}

// readFile reads the store file rel whole, at most limit bytes, or the
// derived value waiting for it (behind).
func (e *Engine) readFile(rel string, limit int64) ([]byte, error) {
	if v, ok := e.derived.Value(rel); ok && int64(len(v.Data)) <= limit {
		return v.Data, nil
	}
	return e.root.ReadFile(rel, limit)
}

// lstat describes the store file rel as the mount shows it (layout.ShownStat),
// never following a link, or the file the derived value waiting for it
// will be (behind).
func (e *Engine) lstat(rel string) (*unix.Stat_t, error) {
	if v, ok := e.derived.Value(rel); ok {
		return layout.ShownStat(rel, &v.Stat), nil
	}
	st, err := e.root.Lstat(rel)
	if err != nil {
		return nil, err
	}
	return layout.ShownStat(rel, st), nil
}

// readUnix reads a timestamp file (Unix seconds); 0 when missing or bad.
func (e *Engine) readUnix(rel string) int64 {
	v, err := e.readValue(rel)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

// isDir reports whether rel is a directory (not a link to one).
func (e *Engine) isDir(rel string) bool {
	st, err := e.root.Lstat(rel)
	return err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
}

// notFound is the ENOENT of a missing session, named as the mount shows it.
func notFound(op, name string) error {
	return &abi.Error{Op: op, Path: name, Errno: syscall.ENOENT, Msg: "no such session"}
}
