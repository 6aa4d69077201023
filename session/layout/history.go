package layout

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/storefs"
)

// historyMarker, in the server's own directory, says that the store's
// history is the server's (the engine's store.go): CloseHistory went through the whole
// store. A store without it (made before history was root's, or whose
// migration a crash interrupted) is walked again at the next start.
const historyMarker = "history-owned"

// CloseHistory gives the store's history to the server, once per store:
// every directory and regular file of each home (home/<uid> itself
// included) and below each space (the space's own directory is root's
// already, its group and mode the space's rule), except the free trees,
// gets the server's uid and its owner's mode bits only; its group stays
// (historyOwner). It runs at each start until it has gone through the
// whole store, before anything is served, and says how many it changed.
// Nothing is followed: a symlink, FIFO or device where history should be
// is left for fsck to name.
func CloseHistory(root *storefs.Root) (int, error) {
	marker := path.Join(StateDir, historyMarker)
	if _, err := root.Lstat(marker); err == nil {
		return 0, nil
	}
	n := 0
	for _, h := range Homes(root) {
		var err error
		if strings.HasPrefix(h, "home/") {
			err = closeTree(root, h, &n)
		} else {
			err = closeBelow(root, h, &n)
		}
		if err != nil {
			return n, err
		}
	}
	// The changes are durable before the marker says they were made.
	if err := syncStore(root); err != nil {
		return n, err
	}
	f, err := root.OpenFile(marker, unix.O_WRONLY|unix.O_CREAT, 0o600)
	if err != nil {
		return n, err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.SyncDir(StateDir)
	}
	return n, err
}

// closeTree closes rel and, for a directory, everything below it, except
// a free tree, which it does not enter.
func closeTree(root *storefs.Root, rel string, n *int) error {
	if FreeTree(rel) {
		return nil
	}
	st, err := root.Lstat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return closeOne(root, rel, n)
	}
	if err := closeBelow(root, rel, n); err != nil {
		return err
	}
	return closeOne(root, rel, n)
}

// closeBelow closes what the directory rel holds.
func closeBelow(root *storefs.Root, rel string, n *int) error {
	ents, err := root.ReadDir(rel)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := closeTree(root, rel+"/"+e.Name, n); err != nil {
			return err
		}
	}
	return nil
}

// closeOne gives the directory or regular file rel to the server, with
// its owner's mode bits only. Anything else is left as it is.
func closeOne(root *storefs.Root, rel string, n *int) error {
	st, err := root.Lstat(rel)
	if errors.Is(err, fs.ErrNotExist) || storefs.IsUnsafe(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFDIR && t != unix.S_IFREG {
		return nil
	}
	mode := st.Mode & 0o700
	if int(st.Uid) == ServerUid && st.Mode&0o7777 == mode {
		return nil
	}
	if err := root.Chown(rel, ServerUid, -1); err != nil {
		return err
	}
	if err := root.Chmod(rel, mode); err != nil {
		return err
	}
	*n++
	return nil
}

// syncStore makes everything written to the store's filesystem durable.
func syncStore(root *storefs.Root) error {
	d, err := root.OpenDir(".")
	if err != nil {
		return err
	}
	defer d.Close()
	return unix.Syncfs(int(d.Fd()))
}

// The server's own ids, which never change: asked of the kernel at every
// value, they were three system calls a send.
var ServerUid, ServerGid = os.Geteuid(), os.Getegid()
