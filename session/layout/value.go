package layout

import (
	"io"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
)

// ReadValue reads the single-value file rel whole with the attributes of
// the very descriptor it read (so the two always agree), its size the
// bytes read: what the engine keeps in its memo (session.Value) and a
// follower serves (cluster/replica). EFBIG for a file over MaxValueFile.
// The attributes are the store's; the mount shows them with ShownStat.
func ReadValue(root *storefs.Root, rel string) ([]byte, unix.Stat_t, error) {
	var st unix.Stat_t
	f, err := root.OpenFile(rel, unix.O_RDONLY, 0)
	if err != nil {
		return nil, st, err
	}
	defer f.Close()
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, st, err
	}
	tooBig := &abi.Error{Op: "read", Path: root.Show(rel), Errno: syscall.EFBIG}
	if st.Size > MaxValueFile {
		return nil, st, tooBig
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxValueFile+1))
	if err != nil {
		return nil, st, err
	}
	if len(data) > MaxValueFile {
		return nil, st, tooBig
	}
	st.Size = int64(len(data)) // what was read is what is served
	return data, st, nil
}
