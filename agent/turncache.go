package agent

import (
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
// can reach another's prompt. A turn is a value; the ToolCalls it holds
// are shared between the prompts that got it and are never written.
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
	cur     map[string]cachedTurn
	old     map[string]cachedTurn
	curSize int // bytes held by cur (entrySize)
	half    int // cur's bound
}

type cachedTurn struct {
	turn provider.Turn
	ok   bool // turnOf's answer: false for a line that is not a turn
}

func newTurnCache(bound int) *turnCache {
	return &turnCache{cur: map[string]cachedTurn{}, old: map[string]cachedTurn{}, half: bound / 2}
}

// turnOf is the package's turnOf, from the cache when the line was read
// before.
func (c *turnCache) turnOf(line []byte) (provider.Turn, bool) {
	if len(line) > maxCachedLine {
		return turnOf(line)
	}
	c.mu.Lock()
	e, hit := c.cur[string(line)]
	if !hit {
		if e, hit = c.old[string(line)]; hit {
			c.put(string(line), e)
		}
	}
	c.mu.Unlock()
	if hit {
		return e.turn, e.ok
	}
	t, ok := turnOf(line)
	c.mu.Lock()
	c.put(string(line), cachedTurn{t, ok})
	c.mu.Unlock()
	return t, ok
}

// put adds an entry to the current generation, starting a new one first
// when it would pass its bound. Caller holds c.mu.
func (c *turnCache) put(line string, e cachedTurn) {
	n := entrySize(line, e)
	if c.curSize+n > c.half {
		c.old, c.cur, c.curSize = c.cur, map[string]cachedTurn{}, 0
	}
	c.cur[line] = e
	c.curSize += n
}

// entrySize is what an entry holds: its line, its turn's strings and the
// overhead.
func entrySize(line string, e cachedTurn) int {
	t := e.turn
	n := entryOverhead + len(line) + len(t.Role) + len(t.Text) + len(t.ToolCallID) + len(t.ToolName)
	for _, tc := range t.ToolCalls {
		n += entryOverhead + len(tc.ID) + len(tc.Name) + len(tc.Arguments)
	}
	return n
}
