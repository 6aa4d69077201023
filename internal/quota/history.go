package quota

import (
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
)

// History bounds the bytes of history each home or shared space holds in
// the store: its sessions' logs (messages.jsonl, events.jsonl), their
// meta.json and snapshots (AGENTS.md, SKILLS.md), live and archived, and
// their file versions (versions/: contents and index). Those are the
// server's files, on root's disk, and grow by what users send and append,
// so without a bound one user fills the store for everyone. Bytes that
// would pass their home's bound are refused with EDQUOT, the free trees'
// "you keep too much", before anything of them is written; a delete gives
// them back.
//
// Bytes are charged to the home their session is in, keyed by the home's
// name as Names is ("home/1001", "shared/team"; the engine leaves root's
// home and temp sessions, memory only and bounded by Limits.TempBytes,
// uncounted), so that a count of the store finds the same: a private home
// is one uid's, and a shared space's history is the server's in the
// store, with no member's uid for a count to find, so a space is bounded
// as a whole, whichever member (or root) writes to it.
//
// A home's bytes are counted the first time they are asked for, by count
// (the engine's: the sizes of those files in every session of the home),
// and from then on kept by the charges and give-backs of its sessions; a
// restart counts them again from the store.
type History struct {
	perHome int64
	count   func(home string) int64

	uses counted[string, int64]
}

// NewHistory bounds each home to perHome bytes of history; count (nil
// until CountWith) counts a home's bytes when first asked.
func NewHistory(perHome int64, count func(home string) int64) *History {
	return &History{perHome: perHome, count: count}
}

// CountWith has count find a home's bytes the first time they are asked
// for: it reads the store, which this package never does. Called once,
// before the bound is used.
func (q *History) CountWith(count func(home string) int64) { q.count = count }

// Held is how many bytes of history home keeps, as counted.
func (q *History) Held(home string) int64 {
	u := q.uses.of(home, func() int64 { return q.count(home) })
	defer u.mu.Unlock()
	return u.v
}

// Of is what charges home's history, for the logs and versions of one of
// its sessions. It holds the home's count itself, so that a charge (one
// for each append) is one lock and no lookup.
func (q *History) Of(home string) Charge {
	return historyOf{q, home, q.uses.entry(home)}
}

// Charge is who pays for a session's bytes in the store: Take before they
// are written (EDQUOT past the bound, nothing charged), Owe for what must
// be written all the same, Give once they are taken back or removed.
type Charge interface {
	Take(n int64) error
	Owe(n int64)
	Give(n int64)
}

// historyOf is History's Charge for one home.
type historyOf struct {
	q    *History
	home string
	u    *use[int64]
}

// lock takes the home's count, counted when it was not yet.
func (h historyOf) lock() { h.u.lock(func() int64 { return h.q.count(h.home) }) }

// Room is EDQUOT when home has no room for n bytes of history more; it
// charges nothing: a check before what comes ahead of those bytes is made
// (a session, an agent), whose writes take them then.
func (q *History) Room(home string, n int64) error {
	if n <= 0 {
		return nil
	}
	h := historyOf{q, home, q.uses.entry(home)}
	h.lock()
	defer h.u.mu.Unlock()
	return h.over(n)
}

// Take charges the home n bytes more, or refuses with EDQUOT when that
// would pass its bound (nothing is charged then).
func (h historyOf) Take(n int64) error {
	if n <= 0 {
		return nil
	}
	h.lock()
	defer h.u.mu.Unlock()
	if err := h.over(n); err != nil {
		return err
	}
	h.u.v += n
	return nil
}

// over is the refusal of n bytes more to the home, its count's lock
// held, when they would pass its bound.
func (h historyOf) over(n int64) error {
	if h.u.v+n > h.q.perHome {
		return abi.Errorf(syscall.EDQUOT, "", "%s keeps %d bytes of history; %d more would pass the %d one home or space may", h.home, h.u.v, n, h.q.perHome)
	}
	return nil
}

// Owe charges the home n bytes without a check: what must be recorded
// past the bound (the end of a run that was stopped, a few hundred
// bytes, so that its session is not left running).
func (h historyOf) Owe(n int64) {
	if n <= 0 {
		return
	}
	h.lock()
	h.u.v += n
	h.u.mu.Unlock()
}

// Give takes n bytes off the home's count (what was taken back or
// deleted). A home not counted yet is left so: its count will find the
// store as it is.
func (h historyOf) Give(n int64) {
	if n <= 0 {
		return
	}
	h.u.mu.Lock()
	defer h.u.mu.Unlock()
	takeOff(h.u, n)
}
