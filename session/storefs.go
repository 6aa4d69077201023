package session

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/session/sealedlog"

	"github.com/google/renameio/v2"
)

// owner is who owns what the engine creates in one home or shared space, and
// with which modes: a private home is its uid's alone (0700/0600); a shared
// space's files belong to the writing uid and the space's group, with group
// access (0770/0660), so that the kernel enforces both through the mount.
type owner struct {
	uid, gid int
	dirMode  os.FileMode
	fileMode os.FileMode
}

func privateOwner(uid, gid uint32) owner {
	return owner{int(uid), int(gid), 0o700, 0o600}
}

// chown gives path to o. EPERM is ignored: a server that is not root cannot
// give files away, and then everything is its own uid's anyway.
func (o owner) chown(path string) error {
	err := os.Lchown(path, o.uid, o.gid)
	if errors.Is(err, syscall.EPERM) {
		return nil
	}
	return err
}

// mkdirAll creates dir and its missing parents below base, each owned by o.
// It is on the send path (the chroot root), so an existing dir costs one
// stat, not a mkdir per component.
func (o owner) mkdirAll(base, dir string) error {
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		return nil
	}
	rel, err := filepath.Rel(base, dir)
	if err != nil || strings.HasPrefix(rel, "..") {
		return errors.New("mkdirAll: " + dir + " is not below " + base)
	}
	cur := base
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		if part == "." || part == "" {
			continue
		}
		cur = filepath.Join(cur, part)
		err := os.Mkdir(cur, o.dirMode)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := os.Chmod(cur, o.dirMode); err != nil { // umask
			return err
		}
		if err := o.chown(cur); err != nil {
			return err
		}
	}
	return nil
}

// writeValue atomically replaces a single-value file with data (renameio:
// temp file, fsync, rename), owned by o. Readers see the old or the new value,
// never a mix.
func (o owner) writeValue(path string, data []byte) error {
	// The temp file goes beside path: renameio would otherwise probe
	// whether the system temp dir is on the same filesystem, every time.
	t, err := renameio.NewPendingFile(path, renameio.WithTempDir(filepath.Dir(path)), renameio.WithStaticPermissions(o.fileMode))
	if err != nil {
		return err
	}
	defer t.Cleanup()
	if _, err := t.Write(data); err != nil {
		return err
	}
	if err := o.chown(t.Name()); err != nil {
		return err
	}
	return t.CloseAtomicallyReplace()
}

// replaceValue atomically replaces a file the server derives from the logs
// (state, updated_at, latest.md, a send's cwd, snapshots) at every send.
//
// It writes the new value into the file's spare twin (".NAME.spare", a dot
// name the mount never shows) and swaps the two names with one
// renameat2(RENAME_EXCHANGE): readers see the old or the new value, never a
// mix. The twin then holds the old value and is rewritten next time. This
// costs a pwrite and a rename; creating a temporary file and renaming it
// over the old one instead cost about 2 ms on this kind of machine (ext4
// mounted with discard), several times a send. A reader holding the old
// file open across two replacements could see it rewritten, so the FUSE
// layer snapshots these files at open.
//
// It does not sync: nothing is acknowledged on its strength (the logs are,
// and they are synced). After a power loss such a file may lag the logs;
// loading the session re-derives it (sess.reconcile).
func (o owner) replaceValue(path string, data []byte) error {
	spare := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".spare")
	f, err := os.OpenFile(spare, os.O_WRONLY|os.O_CREATE, o.fileMode)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(data, 0)
	if err == nil {
		err = f.Truncate(int64(len(data)))
	}
	if err == nil {
		err = f.Chmod(o.fileMode)
	}
	if err == nil {
		err = o.fchown(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	err = unix.Renameat2(unix.AT_FDCWD, spare, unix.AT_FDCWD, path, unix.RENAME_EXCHANGE)
	if errors.Is(err, syscall.ENOENT) { // no old value yet
		err = os.Rename(spare, path)
	}
	return err
}

// fchown is chown for an open file.
func (o owner) fchown(f *os.File) error {
	err := f.Chown(o.uid, o.gid)
	if errors.Is(err, syscall.EPERM) {
		return nil
	}
	return err
}

// writeNew creates path with data, owned by o, and syncs it (for files of
// a directory that is not yet in place, so needs no atomic replace).
func (o owner) writeNew(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, o.fileMode)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(o.fileMode) // umask
	}
	if err == nil {
		err = o.fchown(f)
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
func readValue(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}

// readUnix reads a timestamp file (Unix seconds); 0 when missing or bad.
func readUnix(path string) int64 {
	v, err := readValue(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

// syncDir makes a directory entry change durable.
func syncDir(dir string) error { return sealedlog.SyncDir(dir) }
