package prompt

import (
	"sync"

	"github.com/ctxfs/ctxfs/agent/modelapi"
)

// turnCache keeps the turns of the message lines that prompts read
// (TurnOf), by each line's exact bytes. A session's next run reads the
// same lines again, and parsing them was most of a long conversation's
// time to its first delta (docs/benchmarks.md, FirstDelta): with the
// cache a prompt parses only the lines written since the last one.
//
// An entry is handed out for a line with the very same bytes only, which
// would parse to the very same turn, so nothing of one session's text
// can reach another's prompt; and only to prompts of the uid that read
// it, so that no user can learn, by timing prompts of lines written out
// byte for byte, whether another's lines were read lately (most lines
// hold their run's random id, but imported ones need not). Each uid has
// its own room, so that one user's lines do not push out another's
// either (a user would learn, by timing their own prompts, that others
// sent): see turnCacheBytes. A turn is a value; the ToolCalls it holds
// are shared between the prompts that got it and are never written.

const (
	// turnUidBytes bounds what the cache holds for one uid, lines and
	// turns: two generations of at most half of it each, room for the
	// turns of the 4 MiB a prompt reads (about twice the lines' bytes).
	// turnCacheBytes bounds what it holds for all uids: two uids' full
	// rooms. A uid's lines push out its own only; a third uid's, once
	// all together would pass the bound, the room of the uid whose lines
	// were read the longest ago.
	turnUidBytes   = 16 << 20
	turnCacheBytes = 2 * turnUidBytes
	// maxCachedLine: a longer line is parsed each time, not kept (its
	// parse is small beside its own bytes, and it would push out many).
	maxCachedLine = 64 << 10
	// entryOverhead is an entry's cost beyond its strings: the map slot,
	// the string headers and the turn's fields.
	entryOverhead = 160
)

// It is a bounded map, per uid, from a line to its turn.
type turnCache struct {
	mu      sync.Mutex
	uids    map[uint32]*uidTurns
	held    int    // bytes held by every uid's entries (entrySize)
	bound   int    // held's bound
	uidHalf int    // a uid's current generation's bound
	tick    uint64 // lookups so far: a room's last one says how recently it was read
}

// uidTurns is one uid's room, in two generations: entries go into the
// current one; once it holds its bound it becomes the old one and the
// previous old one is dropped; a hit in the old generation is copied to
// the current one. So the lines read again and again stay, and the room
// holds at most twice its current generation's bound.
type uidTurns struct {
	cur, old         map[string]cachedTurn // by the line's bytes
	curSize, oldSize int
	used             uint64 // turnCache.tick at the room's last lookup
}

type cachedTurn struct {
	turn modelapi.Turn
	ok   bool // TurnOf's answer: false for a line that is not a turn
}

// newTurnCache makes a cache that holds at most bound bytes, and at most
// uidBound (itself at most bound) for one uid.
func newTurnCache(bound, uidBound int) *turnCache {
	return &turnCache{uids: map[uint32]*uidTurns{}, bound: bound, uidHalf: min(uidBound, bound) / 2}
}

// turnOf is TurnOf, from the cache when uid's prompts read
// the line before.
func (c *turnCache) turnOf(uid uint32, line []byte) (modelapi.Turn, bool) {
	if len(line) > maxCachedLine {
		return TurnOf(line)
	}
	c.mu.Lock()
	r := c.room(uid)
	e, hit := r.cur[string(line)]
	if !hit {
		if e, hit = r.old[string(line)]; hit {
			c.put(r, string(line), e)
		}
	}
	c.mu.Unlock()
	if hit {
		return e.turn, e.ok
	}
	t, ok := TurnOf(line)
	c.mu.Lock()
	c.put(c.room(uid), string(line), cachedTurn{t, ok}) // its room may have gone while the lock was let go
	c.mu.Unlock()
	return t, ok
}

// room is uid's room, made when it has none, marked as read now. Caller
// holds c.mu.
func (c *turnCache) room(uid uint32) *uidTurns {
	r := c.uids[uid]
	if r == nil {
		r = &uidTurns{cur: map[string]cachedTurn{}, old: map[string]cachedTurn{}}
		c.uids[uid] = r
	}
	c.tick++
	r.used = c.tick
	return r
}

// put adds the entry of key to r's current generation, starting a new
// one first when it would pass its bound, then drops other uids' rooms,
// the least recently read first, while the cache holds more than its
// bound. Caller holds c.mu.
func (c *turnCache) put(r *uidTurns, key string, e cachedTurn) {
	n := entrySize(key, e)
	if r.curSize+n > c.uidHalf {
		c.held -= r.oldSize
		r.old, r.cur, r.oldSize, r.curSize = r.cur, map[string]cachedTurn{}, r.curSize, 0
	}
	r.cur[key] = e
	r.curSize += n
	c.held += n
	for c.held > c.bound && c.dropOldest(r) {
	}
}

// dropOldest drops the room read the longest ago but keep; false when
// there is none. Caller holds c.mu.
func (c *turnCache) dropOldest(keep *uidTurns) bool {
	var oldest uint32
	var r *uidTurns
	for uid, o := range c.uids {
		if o != keep && (r == nil || o.used < r.used) {
			oldest, r = uid, o
		}
	}
	if r == nil {
		return false
	}
	c.held -= r.curSize + r.oldSize
	delete(c.uids, oldest)
	return true
}

// entrySize is what an entry holds: its key, its turn's strings and the
// overhead.
func entrySize(key string, e cachedTurn) int {
	t := e.turn
	n := entryOverhead + len(key) + len(t.Role) + len(t.Text) + len(t.ToolCallID) + len(t.ToolName)
	for _, tc := range t.ToolCalls {
		n += entryOverhead + len(tc.ID) + len(tc.Name) + len(tc.Arguments)
	}
	return n
}
