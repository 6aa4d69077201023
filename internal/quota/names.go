package quota

import (
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
)

// Names bounds the names each uid makes the server keep in its session
// indexes: sessions and index entries (by-cwd, by-hash, by-uuid). An
// index, once loaded, stays in memory for good (about 1 KiB a name,
// measured through the mount), so what a user can make with mkdir, a
// write of an entry or a send is memory the server holds. A name that
// would pass the uid's bound is refused with EDQUOT, the free trees'
// "you made too much", before anything of it is written. Root is not
// counted.
//
// A name is charged to the owner of the container it is made in (its
// session/ directory), as the free trees charge an inode's owner, so
// that a count of the store finds the same: a uid's names are counted the
// first time they are asked for, by count (the engine's: it loads the
// indexes of every container the uid owns and adds up their names), and
// from then on kept by the charges and give-backs of the indexes.
type Names struct {
	what   string // "sessions and index entries", for the refusal
	perUid int64
	count  func(uid uint32) int64

	uses counted[int64]
}

// NewNames bounds each uid to perUid names of what (named in refusals);
// count (nil until CountWith) counts a uid's names when first asked.
func NewNames(what string, perUid int64, count func(uid uint32) int64) *Names {
	return &Names{what: what, perUid: perUid, count: count}
}

// CountWith has count find a uid's names the first time they are asked
// for: it reads the store, which this package never does. Called once,
// before the bound is used.
func (q *Names) CountWith(count func(uid uint32) int64) { q.count = count }

// of is uid's count, counted when it was not yet; its lock is held on
// return.
func (q *Names) of(uid uint32) *use[int64] {
	return q.uses.of(uid, func() int64 { return q.count(uid) })
}

// Take charges uid n names more, or refuses with EDQUOT when that would
// pass its bound (nothing is charged then). Root is never refused.
func (q *Names) Take(uid uint32, n int64) error {
	if uid == 0 || n <= 0 {
		return nil
	}
	u := q.of(uid)
	defer u.mu.Unlock()
	if u.v+n > q.perUid {
		return abi.Errorf(syscall.EDQUOT, "", "uid %d keeps %d %s, the most one uid may", uid, u.v, q.what)
	}
	u.v += n
	return nil
}

// Give takes n names off uid's count (what was removed, or made no
// further). A uid not counted yet is left so: its count will find the
// store as it is.
func (q *Names) Give(uid uint32, n int64) {
	if uid == 0 || n <= 0 {
		return
	}
	if u := q.uses.ever(uid); u != nil {
		defer u.mu.Unlock()
		if u.known {
			u.v = max(u.v-n, 0)
		}
	}
}

// Held is how many names uid keeps, as counted.
func (q *Names) Held(uid uint32) int64 {
	u := q.of(uid)
	defer u.mu.Unlock()
	return u.v
}
