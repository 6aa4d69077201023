package layout

import (
	"errors"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
)

// OpenStore creates the store directory when missing, secures it, and
// opens it with its top directories in place: home/ and shared/ (root's,
// 0755: the store itself is 0700) and .ctxfs/, the server's own
// bookkeeping (0700, never history).
func OpenStore(dir string) (*storefs.Root, error) {
	r, err := storefs.OpenPrivate(dir)
	if err != nil {
		return nil, err
	}
	for d, mode := range map[string]os.FileMode{StateDir: 0o700, "home": 0o755, "shared": 0o755} {
		err := r.Mkdir(d, mode)
		if errors.Is(err, fs.ErrExist) {
			var st *unix.Stat_t
			if st, err = r.Lstat(d); err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
				err = &storefs.UnsafeError{Op: "open store", Path: r.Show(d), What: storefs.TypeName(st.Mode) + ", not a directory"}
			}
		}
		if err != nil {
			r.Close()
			return nil, err
		}
	}
	return r, nil
}

// AddSpace creates the shared space name in the store, owned by root and
// group gid (-1: root's group) with mode, durably (SPEC section 2; ctxfs
// space add, and root's mkdir through the mount). It needs no engine: a
// store that another process serves sees the space at its next listing.
func AddSpace(root *storefs.Root, name string, gid int, mode os.FileMode) error {
	if !abi.ValidName(name) {
		return abi.Errorf(syscall.EINVAL, "space add", "invalid space name %q", name)
	}
	rel := SharedHome(name)
	if err := root.Mkdir(rel, mode); err != nil {
		return &abi.Error{Op: "space add", Path: name, Errno: abi.Errno(err)}
	}
	if gid < 0 {
		gid = 0
	}
	if err := root.ChownOwned(rel, storefs.Owner{Uid: 0, Gid: gid}); err != nil {
		return err
	}
	return root.SyncDir("shared")
}
