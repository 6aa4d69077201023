package agent

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
			if t, ok := turnOf(l.Text); ok {
				p.Turns = append(p.Turns, t)
			}
		}
		return p
	}
	for round := 0; round < 2; round++ { // the second reads every line from the cache
		if got := NewPrompt(owner0, "", log, 0, nil, 0); !reflect.DeepEqual(got.Turns, want(log).Turns) {
			t.Fatalf("round %d: turns %+v, want %+v", round, got.Turns, want(log).Turns)
		}
	}
	other := []byte(strings.Replace(string(log), "answer one", "answer two", 1))
	got := NewPrompt(owner0, "", other, 0, nil, 0)
	if last := got.Turns[len(got.Turns)-1]; last.Text != "answer two" || !reflect.DeepEqual(got.Turns, want(other).Turns) {
		t.Fatalf("a line with other bytes got %+v", got.Turns)
	}
}

// TestTurnCacheIsBounded: however many lines go through it, the cache
// holds at most its bound; a line read again and again stays in it.
func TestTurnCacheIsBounded(t *testing.T) {
	const bound = 64 << 10
	c := newTurnCache(bound)
	kept := []byte(`{"role":"user","content":"read at every prompt"}`)
	for i := 0; i < 20000; i++ {
		c.turnOf(owner0.Uid, []byte(fmt.Sprintf(`{"role":"user","content":"line %d %s"}`, i, strings.Repeat("x", i%200))))
		if i%50 == 0 {
			c.turnOf(owner0.Uid, kept)
		}
		if held := cacheSize(c); held > bound {
			t.Fatalf("after %d lines the cache holds %d bytes, over its bound %d", i+1, held, bound)
		}
	}
	c.mu.Lock()
	_, inCur := c.cur[string(c.turnKey(owner0.Uid, kept))]
	_, inOld := c.old[string(c.turnKey(owner0.Uid, kept))]
	c.mu.Unlock()
	if !inCur && !inOld {
		t.Fatal("a line read at every prompt was dropped")
	}
	huge := []byte(`{"role":"user","content":"` + strings.Repeat("y", maxCachedLine) + `"}`)
	before := cacheSize(c)
	if tn, ok := c.turnOf(owner0.Uid, huge); !ok || len(tn.Text) != maxCachedLine || cacheSize(c) != before {
		t.Fatalf("a line over maxCachedLine: ok %v, %d bytes of text, cache %d → %d bytes", ok, len(tn.Text), before, cacheSize(c))
	}
}

// cacheSize is the bytes the cache holds now, both generations.
func cacheSize(c *turnCache) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.curSize
	for line, e := range c.old {
		n += entrySize(line, e)
	}
	return n
}
