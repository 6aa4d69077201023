package quota

import (
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
)

// Names bounds the names each home or shared space makes the server keep
// in its session indexes: sessions and index entries (by-cwd, by-hash,
// by-uuid). An index, once loaded, stays in memory for good (about 1 KiB a
// name, measured through the mount), so what a user can make with mkdir,
// a write of an entry or a send is memory the server holds. A name that
// would pass its home's bound is refused with EDQUOT, the free trees'
// "you made too much", before anything of it is written.
//
// A name is charged to the home its container (its session/ directory)
// is in, keyed by the home's name (the engine's: "home/1001", "shared/
// team"; the engine leaves root's home uncounted), so that a count of the
// store finds the same: a private home is one uid's, and a shared space's
// history is the server's in the store, with no member's uid for a count
// to find, so a space is bounded as a whole. A home's names are counted
// the first time they are asked for, by count (the engine's: it loads the
// indexes of every container of the home and adds up their names), and
// from then on kept by the charges and give-backs of the indexes.
type Names struct {
	what    string // "sessions and index entries", for the refusal
	perHome int64
	count   func(home string) int64

	uses counted[string, int64]
}

// NewNames bounds each home to perHome names of what (named in
// refusals); count (nil until CountWith) counts a home's names when first
// asked.
func NewNames(what string, perHome int64, count func(home string) int64) *Names {
	return &Names{what: what, perHome: perHome, count: count}
}

// CountWith has count find a home's names the first time they are asked
// for: it reads the store, which this package never does. Called once,
// before the bound is used.
func (q *Names) CountWith(count func(home string) int64) { q.count = count }

// of is home's count, counted when it was not yet; its lock is held on
// return.
func (q *Names) of(home string) *use[int64] {
	return q.uses.of(home, func() int64 { return q.count(home) })
}

// Take charges home n names more, or refuses with EDQUOT when that would
// pass its bound (nothing is charged then).
func (q *Names) Take(home string, n int64) error {
	if n <= 0 {
		return nil
	}
	u := q.of(home)
	defer u.mu.Unlock()
	if err := q.over(home, u.v, n); err != nil {
		return err
	}
	u.v += n
	return nil
}

// Room refuses with EDQUOT, as Take would, when home has no room for n
// names more; it charges nothing (a check before a caller makes what
// comes ahead of the names, which Take charges later).
func (q *Names) Room(home string, n int64) error {
	if n <= 0 {
		return nil
	}
	u := q.of(home)
	defer u.mu.Unlock()
	return q.over(home, u.v, n)
}

// over is the refusal of n names more to home, which keeps held, when
// they would pass its bound.
func (q *Names) over(home string, held, n int64) error {
	if held+n > q.perHome {
		return abi.Errorf(syscall.EDQUOT, "", "%s keeps %d %s, the most one home or space may", home, held, q.what)
	}
	return nil
}

// Give takes n names off home's count (what was removed, or made no
// further). A home not counted yet is left so: its count will find the
// store as it is.
func (q *Names) Give(home string, n int64) {
	if n <= 0 {
		return
	}
	give(&q.uses, home, n)
}

// Held is how many names home keeps, as counted.
func (q *Names) Held(home string) int64 {
	u := q.of(home)
	defer u.mu.Unlock()
	return u.v
}
