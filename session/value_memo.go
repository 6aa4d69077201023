package session

import (
	"io"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/memo"
)

// Value is a single-value file of the tree as the engine serves it (memo.Value).
type Value = memo.Value

// Memoized reports whether the engine serves a file of the tree from
// memory (Engine.Value): the session's small single values, which every
// `cat`, prompt and status asks for. latest.md, AGENTS.md and SKILLS.md
// can be megabytes and are read from the store at open; index values
// live in the index itself.
func Memoized(pl layout.Place) bool {
	switch pl.Kind {
	case layout.PlaceValue:
		return true
	case layout.PlaceReadOnly:
		return pl.File == abi.FileCreatedAt || pl.File == abi.FileUpdatedAt
	}
	return false
}

// Value returns the content and attributes of the single value at rel
// (Memoized places), from memory when the engine holds them, else read
// from the store once and kept: what the mount serves (fs). The store
// stays the truth: every change the engine makes is written there first,
// and changed() then drops the memory, so the next Value reads the new
// file. A derived value not yet written to the store (behind) is served
// from there, with the attributes its store file will have. The rules
// that protect or judge (archive's state check, self_id claims) read the
// store itself, or the value waiting for it (readValue). EFBIG for a file
// over layout.MaxValueFile. Data is shared: callers must not change it. The
// attributes are shown as the mount shows the store's (layout.ShownStat).
func (e *Engine) Value(rel string) (Value, error) {
	v, err := e.value(rel)
	if err == nil {
		v.Stat = *layout.ShownStat(rel, &v.Stat)
	}
	return v, err
}

func (e *Engine) value(rel string) (Value, error) {
	if v, ok := e.derived.Value(rel); ok {
		return Value(v), nil // the same fields (behind.Value)
	}
	return e.memo.Get(rel, func() (Value, error) {
		f, err := e.root.OpenFile(rel, unix.O_RDONLY, 0)
		if err != nil {
			return Value{}, err
		}
		defer f.Close()
		var v Value
		if err := unix.Fstat(int(f.Fd()), &v.Stat); err != nil {
			return Value{}, err
		}
		if v.Stat.Size > layout.MaxValueFile {
			return Value{}, &abi.Error{Op: "read", Path: e.root.Show(rel), Errno: syscall.EFBIG}
		}
		if v.Data, err = io.ReadAll(io.LimitReader(f, layout.MaxValueFile+1)); err != nil {
			return Value{}, err
		}
		if len(v.Data) > layout.MaxValueFile {
			return Value{}, &abi.Error{Op: "read", Path: e.root.Show(rel), Errno: syscall.EFBIG}
		}
		v.Stat.Size = int64(len(v.Data)) // what was read is what is served
		return v, nil
	})
}
