package agent

import (
	"encoding/binary"
	"sync"

	"github.com/ctxfs/ctxfs/agent/provider"
)

// promptTurns keeps the turns of the message lines that prompts read
// (turnOf), by each line's exact bytes. A session's next run reads the
// same lines again, and parsing them was most of a long conversation's
// time to its first delta (docs/benchmarks.md, FirstDelta): with the
// cache a prompt parses only the lines written since the last one.
//
// An entry is handed out for a line with the very same bytes only, which
// would parse to the very same turn, so nothing of one session's text
// can reach another's prompt; and only to prompts of the uid that read
// it, so that no user can learn, by timing prompts of lines written out
// byte for byte, whether another's lines were read lately (most lines
// hold their run's random id, but imported ones need not). A turn is a
// value; the ToolCalls it holds are shared between the prompts that got
// it and are never written.
var promptTurns = newTurnCache(turnCacheBytes)

const (
	// turnCacheBytes bounds what the cache holds, lines and turns: two
	// generations of at most half of it each.
	turnCacheBytes = 16 << 20
	// maxCachedLine: a longer line is parsed each time, not kept (its
	// parse is small beside its own bytes, and it would push out many).
	maxCachedLine = 64 << 10
	// entryOverhead is an entry's cost beyond its strings: the map slot,
	// the string headers and the turn's fields.
	entryOverhead = 160
)

// turnCache is a bounded map from a line to its turn: entries go into the
// current generation; once it holds half the bound it becomes the old
// one and the previous old one is dropped; a hit in the old generation
// moves to the current one. So the lines read again and again stay, and
// the memory held is at most the bound.
type turnCache struct {
	mu      sync.Mutex
	cur     map[string]cachedTurn // by turnKey
	old     map[string]cachedTurn
	curSize int    // bytes held by cur (entrySize)
	half    int    // cur's bound
	key     []byte // turnKey's, reused under mu
}

type cachedTurn struct {
	turn provider.Turn
	ok   bool // turnOf's answer: false for a line that is not a turn
}

func newTurnCache(bound int) *turnCache {
	return &turnCache{cur: map[string]cachedTurn{}, old: map[string]cachedTurn{}, half: bound / 2}
}

// turnOf is the package's turnOf, from the cache when uid's prompts read
// the line before.
func (c *turnCache) turnOf(uid uint32, line []byte) (provider.Turn, bool) {
	if len(line) > maxCachedLine {
		return turnOf(line)
	}
	c.mu.Lock()
	key := c.turnKey(uid, line)
	e, hit := c.cur[string(key)]
	if !hit {
		if e, hit = c.old[string(key)]; hit {
			c.put(string(key), e)
		}
	}
	c.mu.Unlock()
	if hit {
		return e.turn, e.ok
	}
	t, ok := turnOf(line)
	c.mu.Lock()
	c.put(string(c.turnKey(uid, line)), cachedTurn{t, ok})
	c.mu.Unlock()
	return t, ok
}

// turnKey is an entry's key: uid's four bytes, then the line. It is
// c.key, valid until the next call; a lookup by it copies nothing.
// Caller holds c.mu.
func (c *turnCache) turnKey(uid uint32, line []byte) []byte {
	c.key = append(binary.LittleEndian.AppendUint32(c.key[:0], uid), line...)
	return c.key
}

// put adds the entry of key to the current generation, starting a new
// one first when it would pass its bound. Caller holds c.mu.
func (c *turnCache) put(key string, e cachedTurn) {
	n := entrySize(key, e)
	if c.curSize+n > c.half {
		c.old, c.cur, c.curSize = c.cur, map[string]cachedTurn{}, 0
	}
	c.cur[key] = e
	c.curSize += n
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
