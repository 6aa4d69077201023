package tree

import (
	"bytes"
	"path"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/layout"
	"golang.org/x/sys/unix"
)

// CheckOpen says whether a file of the tree may be opened with flags
// (SPEC 5, 6, 9): a log only for appending, read-only files and the list
// only for reading, index values for writing only where SPEC 9 allows.
func (t Tree) CheckOpen(pl layout.Place, flags int) error {
	write := flags&syscall.O_ACCMODE != syscall.O_RDONLY
	trunc := flags&syscall.O_TRUNC != 0
	switch pl.Kind {
	case layout.PlaceLog:
		if write && (flags&syscall.O_APPEND == 0 || trunc) {
			return abi.Errorf(syscall.EPERM, "open", "a log is opened for writing with O_APPEND only")
		}
	case layout.PlaceReadOnly, layout.PlaceArchived, layout.PlaceIndexList, layout.PlaceVersion:
		if write || trunc {
			return abi.Errorf(syscall.EPERM, "open", "read-only file")
		}
	case layout.PlaceIndexCurrent, layout.PlaceIndexEntry:
		if write && !pl.WritableIndex() {
			return abi.Errorf(syscall.EPERM, "open", "by-cwd is read only")
		}
	}
	return nil
}

// creatable says whether a name may be made at rel at all (by mkdir,
// create, symlink, link or mknod): EPERM outside the ABI and in archives,
// EINVAL for a bad name in a slot that takes one.
func Creatable(rel string) (layout.Place, error) {
	pl := layout.Classify(rel)
	parent := layout.Classify(path.Dir(rel))
	switch {
	case parent.Kind == layout.PlaceArchived:
		return pl, abi.Errorf(syscall.EPERM, "create", "archived sessions are read only")
	case pl.Kind == layout.PlaceBadName:
		return pl, abi.Errorf(syscall.EINVAL, "create", "invalid name %q", path.Base(rel))
	case !pl.Exists():
		return pl, abi.Errorf(syscall.EPERM, "create", "not a name the ABI allows here")
	}
	return pl, nil
}

// CheckCreate says whether a file may be created at rel through the mount:
// only index values SPEC 9 lets users write (current, by-hash/<key>,
// by-uuid/<uuid>); the value is committed when it is written and closed.
// Every other file of the ABI is made by the engine.
func (t Tree) CheckCreate(rel string) (layout.Place, error) {
	pl, err := Creatable(rel)
	if err == nil && !pl.WritableIndex() {
		err = abi.Errorf(syscall.EPERM, "create", "only the engine makes this file")
	}
	return pl, err
}

// MakeNode is the answer to a symlink, hard link or device node made in a
// directory of the ABI: the tree holds only the directories and regular
// files the engine makes (EPERM; EINVAL for a bad name in a name slot).
func (t Tree) MakeNode(rel string) error {
	if _, err := Creatable(rel); err != nil {
		return err
	}
	return abi.Errorf(syscall.EPERM, "create", "the ABI holds no links or device nodes")
}

// Unlink removes rel through the mount: by-hash and by-uuid entries only;
// every other entry of the ABI stays (EPERM).
func (t Tree) Unlink(c layout.Caller, rel string) error {
	pl, err := Removable(rel)
	if err != nil {
		return err
	}
	x, err := t.e.Index(pl.Container)
	if err != nil {
		return err
	}
	return x.RemoveEntry(pl.IndexKind, pl.Key)
}

// Removable says whether rel may be unlinked through the mount: by-hash
// and by-uuid entries only (EPERM).
func Removable(rel string) (layout.Place, error) {
	pl := layout.Classify(rel)
	if pl.Kind != layout.PlaceIndexEntry || !pl.WritableIndex() || layout.Classify(path.Dir(rel)).Kind == layout.PlaceArchived {
		return pl, abi.Errorf(syscall.EPERM, "unlink", "entries of the ABI are not removed")
	}
	return pl, nil
}

// Rmdir: a non-empty directory is ENOTEMPTY, as anywhere; an empty ABI
// directory still may not go (EPERM).
func (t Tree) Rmdir(c layout.Caller, rel string) error {
	ents, err := t.root.ReadDir(rel)
	if err != nil {
		return err
	}
	if len(ents) > 0 {
		return syscall.ENOTEMPTY
	}
	return abi.Errorf(syscall.EPERM, "rmdir", "directories of the ABI are not removed")
}

// SetAttr is a change of attributes through the mount; nil fields stay.
// It travels between hosts as JSON (cluster/peer).
type SetAttr struct {
	Size  *uint64           `json:"size,omitempty"`
	Mode  *uint32           `json:"mode,omitempty"`
	Uid   *uint32           `json:"uid,omitempty"`
	Gid   *uint32           `json:"gid,omitempty"`
	Times *[2]unix.Timespec `json:"times,omitempty"` // atime, mtime; unix.UTIME_OMIT keeps one
	// Now says the times given are the present, asked without a time
	// (touch): the kernel lets any writer of the file set them, where a
	// time given is its owner's to set.
	Now bool `json:"now,omitempty"`
}

// OnlyTimes reports whether a change touches nothing but times (and a
// size the caller has judged already).
func (a SetAttr) OnlyTimes() bool { return a.Mode == nil && a.Uid == nil && a.Gid == nil }

// OnlyMode reports whether a change touches nothing but the mode (and a
// size the caller has applied already).
func (a SetAttr) OnlyMode() bool { return a.Uid == nil && a.Gid == nil && a.Times == nil }

// VirtualSetattr is the answer to a setattr of a virtual file (ctl,
// index/list, index/current, an index entry): nothing in the store to
// change, so a truncation to zero where the file takes one (`echo … >
// ctl`) and a touch are no-ops, anything else EPERM.
func VirtualSetattr(pl layout.Place, a SetAttr) error {
	if a.Size != nil && (*a.Size != 0 || !Truncatable(pl)) || !a.OnlyTimes() {
		return abi.Errorf(syscall.EPERM, "setattr", "the engine owns this file")
	}
	return nil
}

// Truncatable places take `>` (truncate to 0 before the new value).
func Truncatable(pl layout.Place) bool {
	switch pl.Kind {
	case layout.PlaceValue, layout.PlaceCtl, layout.PlaceIndexCurrent, layout.PlaceIndexEntry:
		return true
	}
	return false
}

// Apply changes the mode, owner and times a SetAttr names of the store
// file rel (never of what a link points at); its size is each caller's
// to judge and apply.
func (a SetAttr) Apply(root *storefs.Root, rel string) error {
	if a.Mode != nil {
		if err := root.Chmod(rel, *a.Mode&07777); err != nil {
			return err
		}
	}
	if a.Uid != nil || a.Gid != nil {
		uid, gid := -1, -1
		if a.Uid != nil {
			uid = int(*a.Uid)
		}
		if a.Gid != nil {
			gid = int(*a.Gid)
		}
		if err := root.Chown(rel, uid, gid); err != nil {
			return err
		}
	}
	if a.Times != nil {
		return root.Utimes(rel, *a.Times)
	}
	return nil
}

// CheckPlainValue judges a complete value written to a single-value file
// that needs nothing but its bytes to be judged: state (EINVAL for one
// that is not a state), cwd (abi.CheckCwd). Any other file passes here
// (meta.json is judged with its session's meta, by the engine).
func CheckPlainValue(file string, data []byte) error {
	v := string(bytes.TrimSuffix(data, []byte("\n")))
	switch file {
	case abi.FileState:
		if !abi.ValidState(v) {
			return abi.Errorf(syscall.EINVAL, "write", "invalid state %q", v)
		}
	case abi.FileCwd:
		return abi.CheckCwd(v)
	}
	return nil
}
