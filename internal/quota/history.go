package quota

import (
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
)

// History bounds the bytes of history each uid's private home holds in
// the store: its sessions' logs (messages.jsonl, events.jsonl), live and
// archived, and their file versions (versions/: contents and index).
// Those are the server's files, on root's disk, and grow by what the uid
// sends and appends, so without a bound one user fills the store for
// everyone. Bytes that would pass the uid's bound are refused with
// EDQUOT, the free trees' "you keep too much", before anything of them is
// written; a delete gives them back. Root is not counted, nor a shared
// space's history (the server's in the store, with no member's uid for a
// count to find after a restart), nor a temp session's (memory only,
// bounded by Limits.TempBytes).
//
// A uid's bytes are counted the first time they are asked for, by count
// (the engine's: the sizes of those files in every session of the home),
// and from then on kept by the charges and give-backs of its sessions; a
// restart counts them again from the store.
type History struct {
	perUid int64
	count  func(uid uint32) int64

	uses counted[uint32, int64]
}

// NewHistory bounds each uid to perUid bytes of history; count (nil until
// CountWith) counts a uid's bytes when first asked.
func NewHistory(perUid int64, count func(uid uint32) int64) *History {
	return &History{perUid: perUid, count: count}
}

// CountWith has count find a uid's bytes the first time they are asked
// for: it reads the store, which this package never does. Called once,
// before the bound is used.
func (q *History) CountWith(count func(uid uint32) int64) { q.count = count }

// of is uid's bytes, counted when they were not yet; its lock is held on
// return.
func (q *History) of(uid uint32) *use[int64] {
	return q.uses.of(uid, func() int64 { return q.count(uid) })
}

// Take charges uid n bytes more, or refuses with EDQUOT when that would
// pass its bound (nothing is charged then). Root is never refused.
func (q *History) Take(uid uint32, n int64) error {
	if uid == 0 || n <= 0 {
		return nil
	}
	u := q.of(uid)
	defer u.mu.Unlock()
	if u.v+n > q.perUid {
		return abi.Errorf(syscall.EDQUOT, "", "uid %d keeps %d bytes of history; %d more would pass the %d one uid may", uid, u.v, n, q.perUid)
	}
	u.v += n
	return nil
}

// Owe charges uid n bytes without a check: what must be recorded past the
// bound (the end of a run that was stopped, a few hundred bytes, so that
// its session is not left running).
func (q *History) Owe(uid uint32, n int64) {
	if uid == 0 || n <= 0 {
		return
	}
	u := q.of(uid)
	u.v += n
	u.mu.Unlock()
}

// Give takes n bytes off uid's count (what was taken back or deleted). A
// uid not counted yet is left so: its count will find the store as it is.
func (q *History) Give(uid uint32, n int64) {
	if uid == 0 || n <= 0 {
		return
	}
	give(&q.uses, uid, n)
}

// Held is how many bytes of history uid keeps, as counted.
func (q *History) Held(uid uint32) int64 {
	u := q.of(uid)
	defer u.mu.Unlock()
	return u.v
}

// Of is what charges uid's history, for the logs and versions of one
// session of its home.
func (q *History) Of(uid uint32) Charge { return historyOf{q, uid} }

// Charge is who pays for a session's bytes in the store: Take before they
// are written (EDQUOT past the bound, nothing charged), Owe for what must
// be written all the same, Give once they are taken back or removed.
type Charge interface {
	Take(n int64) error
	Owe(n int64)
	Give(n int64)
}

// historyOf is History's Charge for one uid.
type historyOf struct {
	q   *History
	uid uint32
}

func (h historyOf) Take(n int64) error { return h.q.Take(h.uid, n) }
func (h historyOf) Owe(n int64)        { h.q.Owe(h.uid, n) }
func (h historyOf) Give(n int64)       { h.q.Give(h.uid, n) }
