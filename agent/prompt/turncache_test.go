package prompt

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// TestPromptTurnsAreTheLinesOwn: a prompt read again, from the cache, is
// the prompt read afresh (turns with text, tool calls, tool results, a
// line that is no turn); a line with other bytes of the same length,
// as another session or an edited history would hold, gets its own turn,
// never the cached one.
func TestPromptTurnsAreTheLinesOwn(t *testing.T) {
	lines := []string{
		`{"role":"user","run":"r1","content":"question one","ts":"2026-12-02T10:00:00.000Z"}`,
		`{"role":"assistant","run":"r1","content":[{"type":"text","text":"let me look"},{"type":"tool_call","id":"c1","name":"fs.read","arguments":{"path":"a"}}],"ts":"2026-12-02T10:00:00.001Z"}`,
		`{"role":"tool","run":"r1","name":"fs.read","content":[{"type":"tool_result","tool_call_id":"c1","content":"A","is_error":false}],"ts":"2026-12-02T10:00:00.002Z"}`,
		`{"note":"not a message"}`,
		`{"role":"assistant","run":"r1","content":"answer one","ts":"2026-12-02T10:00:00.003Z"}`,
	}
	log := []byte(strings.Join(lines, "\n") + "\n")
	fresh := func(log []byte) []Line { return linesAfter(log, 0, 0) }
	want := func(log []byte) *Prompt {
		p := &Prompt{}
		for _, l := range fresh(log) {
			if t, ok := TurnOf(l.Text); ok {
				p.Turns = append(p.Turns, t)
			}
		}
		return p
	}
	for round := 0; round < 2; round++ { // the second reads every line from the cache
		if got := memos.New(owner0, "", log, 0, nil, 0); !reflect.DeepEqual(got.Turns, want(log).Turns) {
			t.Fatalf("round %d: turns %+v, want %+v", round, got.Turns, want(log).Turns)
		}
	}
	other := []byte(strings.Replace(string(log), "answer one", "answer two", 1))
	got := memos.New(owner0, "", other, 0, nil, 0)
	if last := got.Turns[len(got.Turns)-1]; last.Text != "answer two" || !reflect.DeepEqual(got.Turns, want(other).Turns) {
		t.Fatalf("a line with other bytes got %+v", got.Turns)
	}
}

// TestTurnCacheIsBounded: however many lines go through it, the cache
// holds at most its bound; a line read again and again stays in it.
func TestTurnCacheIsBounded(t *testing.T) {
	const bound = 64 << 10
	c := newTurnCache(bound, bound)
	kept := []byte(`{"role":"user","content":"read at every prompt"}`)
	for i := 0; i < 20000; i++ {
		c.turnOf(owner0.Uid, manyLine(i))
		if i%50 == 0 {
			c.turnOf(owner0.Uid, kept)
		}
		if held := cacheSize(t, c); held > bound {
			t.Fatalf("after %d lines the cache holds %d bytes, over its bound %d", i+1, held, bound)
		}
	}
	if !holds(c, owner0.Uid, kept) {
		t.Fatal("a line read at every prompt was dropped")
	}
	huge := []byte(`{"role":"user","content":"` + strings.Repeat("y", maxCachedLine) + `"}`)
	before := cacheSize(t, c)
	if tn, ok := c.turnOf(owner0.Uid, huge); !ok || len(tn.Text) != maxCachedLine || cacheSize(t, c) != before {
		t.Fatalf("a line over maxCachedLine: ok %v, %d bytes of text, cache %d → %d bytes", ok, len(tn.Text), before, cacheSize(t, c))
	}
}

// TestTurnCacheUidsApart: one uid that reads many lines fills its own
// room and pushes out its own lines, never another uid's, while the two
// rooms fit the bound; a third uid's lines push out the room read the
// longest ago, whole, and the cache still holds at most its bound.
func TestTurnCacheUidsApart(t *testing.T) {
	const uidBound, bound = 32 << 10, 48 << 10 // a full room and a small one fit; two full ones do not
	c := newTurnCache(bound, uidBound)
	a, b, third := uint32(1000), uint32(1001), uint32(1002)
	mine := []byte(`{"role":"user","content":"uid 1000's line"}`)
	c.turnOf(a, mine)
	for i := 0; i < 5000; i++ {
		c.turnOf(b, manyLine(i))
		if held := roomSize(c, b); held > uidBound {
			t.Fatalf("after %d lines uid %d holds %d bytes, over its room %d", i+1, b, held, uidBound)
		}
	}
	if !holds(c, a, mine) {
		t.Fatalf("uid %d's lines pushed out uid %d's", b, a)
	}
	if holds(c, b, mine) {
		t.Fatalf("uid %d holds uid %d's line", b, a)
	}
	c.turnOf(a, mine) // read lately: uid b's room is now the oldest
	for i := 0; i < 5000; i++ {
		c.turnOf(third, manyLine(i))
		if held := cacheSize(t, c); held > bound {
			t.Fatalf("after %d lines of a third uid the cache holds %d bytes, over its bound %d", i+1, held, bound)
		}
	}
	if !holds(c, a, mine) || roomSize(c, b) != 0 {
		t.Fatalf("a third uid's lines: uid %d's line kept %v (want true), uid %d still holds %d bytes (want none)", a, holds(c, a, mine), b, roomSize(c, b))
	}
}

// manyLine is the i-th of many different message lines.
func manyLine(i int) []byte {
	return []byte(fmt.Sprintf(`{"role":"user","content":"line %d %s"}`, i, strings.Repeat("x", i%200)))
}

// holds: uid's room holds line, in either generation.
func holds(c *turnCache, uid uint32, line []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.uids[uid]
	if r == nil {
		return false
	}
	_, inCur := r.cur[string(line)]
	_, inOld := r.old[string(line)]
	return inCur || inOld
}

// roomSize is the bytes uid's room holds, both generations, counted.
func roomSize(c *turnCache, uid uint32) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return counted(c.uids[uid])
}

func counted(r *uidTurns) int {
	n := 0
	if r != nil {
		for _, gen := range []map[string]cachedTurn{r.cur, r.old} {
			for line, e := range gen {
				n += entrySize(line, e)
			}
		}
	}
	return n
}

// cacheSize is the bytes the cache holds now, every room counted; it
// fails t when the cache's own account says otherwise.
func cacheSize(t *testing.T, c *turnCache) int {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.uids {
		n += counted(r)
	}
	if n != c.held {
		t.Fatalf("the cache holds %d bytes and counts %d", n, c.held)
	}
	return n
}
