package session

import (
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/memo"
)

// The engine reaches its store only through e.root (package storefs):
// store-relative paths, walked without following any symlink. This file
// holds the few shapes in which the engine reads and writes there, and
// the single values it serves from memory (Value, package memo).

// writeValue atomically and durably replaces a single-value file a user
// wrote through the mount: synced before the close that wrote it returns.
func (e *Engine) writeValue(rel string, data []byte, own storefs.Owner) error {
	return e.root.ReplaceFile(rel, data, own, storefs.SyncAll)
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
func (e *Engine) isDir(rel string) bool { return layout.IsDir(e.root, rel) }

// notFound is the ENOENT of a missing session, named as the mount shows it.
func notFound(op, name string) error {
	return &abi.Error{Op: op, Path: name, Errno: syscall.ENOENT, Msg: "no such session"}
}

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
	if v, ok := e.derived.Value(rel); ok {
		v.Stat = *layout.ShownStat(rel, &v.Stat)
		return Value(v), nil // the same fields (behind.Value)
	}
	return e.memo.Get(rel, func() (Value, error) { // kept as shown: once, not at every open
		data, st, err := layout.ReadValue(e.root, rel)
		return Value{Data: data, Stat: *layout.ShownStat(rel, &st)}, err
	})
}
