package quota

import (
	"sync"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
)

// Quota bounds one kind of thing users make the server hold (socket
// connections, files open through the mount, runs): at most perUid for any
// one uid and at most total for all uids together, so that no user can
// take what others need, and all of them together cannot take the
// descriptors the mount and root need. Root is not counted: it is the
// reserve, and it could take the machine down anyway. A refusal is an
// immediate error with the quota's errno, never a wait.
type Quota struct {
	what          string        // "connections", for the refusal
	errno         syscall.Errno // EAGAIN or EMFILE
	perUid, total int

	mu   sync.Mutex
	held map[uint32]int
	sum  int
}

// New is a quota of what (named in refusals, which carry errno): at most
// perUid for one uid, total for all.
func New(what string, errno syscall.Errno, perUid, total int) *Quota {
	return &Quota{what: what, errno: errno, perUid: perUid, total: total, held: map[uint32]int{}}
}

// Take holds one for uid, or refuses.
func (q *Quota) Take(uid uint32) error { return q.TakeN(uid, 1) }

// Give gives back one that Take held for uid.
func (q *Quota) Give(uid uint32) { q.GiveN(uid, 1) }

// TakeN holds n more for uid (bytes, for a quota of bytes), or refuses
// and holds nothing.
func (q *Quota) TakeN(uid uint32, n int) error {
	if uid == 0 || n <= 0 {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.held[uid]+n > q.perUid:
		return abi.Errorf(q.errno, "", "uid %d holds %d %s, and %d more is over the most one uid may", uid, q.held[uid], q.what, n)
	case q.sum+n > q.total:
		return abi.Errorf(q.errno, "", "the server holds %d %s for users, the most it may", q.sum, q.what)
	}
	q.held[uid] += n
	q.sum += n
	return nil
}

// GiveN gives back n that TakeN held for uid.
func (q *Quota) GiveN(uid uint32, n int) {
	if uid == 0 || n <= 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	n = min(n, q.held[uid])
	q.held[uid] -= n
	q.sum -= n
	if q.held[uid] == 0 {
		delete(q.held, uid)
	}
}

// Held is how many uid holds now.
func (q *Quota) Held(uid uint32) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.held[uid]
}
