package filestamp

import (
	"path/filepath"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestMemoKeeps: a value is kept for its key when its files' stamps are
// older than the window, not when one is within it (and what was kept
// for that key is dropped), and at most max of them: past that it
// starts over. The zero Memo keeps one.
func TestMemoKeeps(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	testkit.WriteFile(t, p, "x", 0o644)
	fresh := stampOf(t, p)
	old := Stamp{Ino: 1} // changed at the epoch

	m := NewMemo[string, int](2)
	if !m.Keep("a", 1, RacyWindow, old, Stamp{}) {
		t.Fatal("a value of old files was not kept")
	}
	if v, ok := m.Get("a"); !ok || v != 1 {
		t.Fatalf("Get(a) = %v, %v", v, ok)
	}
	if m.Keep("a", 2, RacyWindow, old, fresh) {
		t.Fatal("a value of a file changed just now was kept")
	}
	if _, ok := m.Get("a"); ok {
		t.Fatal("what was kept for a key is still there after a racy Keep of it")
	}
	if !m.Keep("a", 3, 0, fresh) {
		t.Fatal("a value was not kept with no window")
	}
	m.Keep("b", 4, RacyWindow, old)
	if m.Len() != 2 {
		t.Fatalf("Len %d, want 2", m.Len())
	}
	m.Keep("c", 5, RacyWindow, old)
	if _, ok := m.Get("a"); ok || m.Len() != 1 {
		t.Fatalf("past max: Len %d, a kept %v; want it started over", m.Len(), ok)
	}
	m.Clear()
	if m.Len() != 0 {
		t.Fatal("Clear left values")
	}

	var one Memo[Stamp, string]
	one.Keep(old, "old", RacyWindow, old)
	one.Keep(Stamp{Ino: 2}, "other", RacyWindow, old)
	if _, ok := one.Get(old); ok || one.Len() != 1 {
		t.Fatalf("the zero Memo kept %d values", one.Len())
	}
}
