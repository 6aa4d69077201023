package index

import (
	"errors"
	"io/fs"
	"sort"
	"strings"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"golang.org/x/sys/unix"
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

// readValue reads a single-value file of the index. ok is false when it
// does not exist; err reports one that is not a regular file (never
// followed, never opened if it is a FIFO: storefs) or holds no valid name,
// so a hand-edited file is never trusted.
func (x *Index) readValue(rel string) (name string, ok bool, err error) {
	if data, pending := x.pending[rel]; pending {
		if data == nil {
			return "", false, nil // removed, not yet in the store
		}
		name, err = ParseValue(data)
		return name, err == nil, err
	}
	data, err := x.root.ReadFile(rel, maxValueBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	name, err = ParseValue(data)
	return name, err == nil, err
}

// Values changes the index's value files for it, durably through a
// write-ahead journal (sealedlog.Journal): a replace or removal takes no
// sync of its own, and is durable at the journal's next commit, which
// Sync waits for.
type Values interface {
	PutValue(rel string, data []byte, own storefs.Owner) error
	RemoveValue(rel string) error
	Sync() error
}

// UseValues has every later change of a value file go through v.
func (x *Index) UseValues(v Values) {
	x.wmu.Lock()
	x.values = v
	x.wmu.Unlock()
}

// writeFile replaces a value file atomically: readers see the old or the
// new value, never a mix. sync is storefs.SyncAll for what a user writes
// through the mount (durable before the close returns) and SyncData for
// what a send moves (current, by-cwd): a power loss may leave those
// naming the previous session, never half a name. Through Values (the
// engine's journal), a send's change costs no sync at all: it is durable
// with the send's next record, before the send's end is acknowledged.
func (x *Index) writeFile(rel string, data []byte, sync storefs.Sync) error {
	if x.values == nil {
		return x.root.ReplaceFile(rel, data, x.own, sync)
	}
	if err := x.values.PutValue(rel, data, x.own); err != nil {
		return err
	}
	if sync == storefs.SyncAll {
		return x.values.Sync()
	}
	return nil
}

// mkdir creates a directory of the index with the index's owner and mode,
// or checks that the existing one is a real directory, not a symlink or a
// file.
func (x *Index) mkdir(rel string) error {
	err := x.root.MkdirOwned(rel, x.own)
	if err == nil || !errors.Is(err, fs.ErrExist) {
		return x.errIf("load", rel, err)
	}
	st, err := x.root.Lstat(rel)
	if err != nil {
		return x.err("load", rel, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return abi.Errorf(syscall.ENOTDIR, "load", "%s is not a directory", x.root.Show(rel))
	}
	return nil
}

// removeFile unlinks rel; one already gone is fine (Remove may be retried).
func (x *Index) removeFile(rel string) error {
	if x.values != nil {
		return x.values.RemoveValue(rel)
	}
	if err := x.root.Remove(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// err is ioErr naming rel as the store shows it.
func (x *Index) err(op, rel string, err error) *abi.Error {
	return ioErr(op, x.root.Show(rel), err)
}

// errIf is err that passes nil through (a nil *abi.Error in an error
// interface would not be nil).
func (x *Index) errIf(op, rel string, err error) error {
	if err == nil {
		return nil
	}
	return x.err(op, rel, err)
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
	// The path is already in Path.
	return &abi.Error{Op: op, Path: p, Errno: abi.Errno(err), Msg: storefs.Words(err)}
}

// pendingKeys are the entries of directory d that x.pending holds and
// ents (its listing in the store) does not: written by the writer, not
// yet in the store.
func (x *Index) pendingKeys(d string, ents []storefs.Entry) []string {
	if len(x.pending) == 0 {
		return nil
	}
	listed := make(map[string]bool, len(ents))
	for _, e := range ents {
		listed[e.Name] = true
	}
	var keys []string
	for p, data := range x.pending {
		if key, ok := strings.CutPrefix(p, d+"/"); ok && data != nil && !listed[key] && !strings.Contains(key, "/") {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	return keys
}
