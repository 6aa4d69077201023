package filestamp

import (
	"sync"
	"time"
)

// Memo keeps what was found of files (a parse, a verdict) by a key that
// names them, for as long as the caller finds them unchanged: the rule
// the definition cache, the engine's meta.json and the versions' checks
// share. A value is kept only when none of the files it was found in
// changed within the racy window before the Keep (ChangedWithin): their
// times could not tell the next change apart. It holds at most max
// values and then starts over, so what a uid can make it hold is bounded
// however many files it makes. Whether a value still holds (the same
// stamps) is the caller's to tell, by its key or its value: a Memo never
// stats a file either.
type Memo[K comparable, V any] struct {
	mu  sync.Mutex
	max int
	m   map[K]V
}

// NewMemo returns an empty Memo of at most max values. The zero Memo
// keeps one.
func NewMemo[K comparable, V any](max int) *Memo[K, V] {
	return &Memo[K, V]{max: max}
}

// Get is the value kept for k.
func (m *Memo[K, V]) Get(k K) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.m[k]
	return v, ok
}

// Keep keeps v for k, unless one of stamps (those of the files v was
// found in, as they were before it was found) changed within window of
// now: then nothing is kept for k, and it reports false.
func (m *Memo[K, V]) Keep(k K, v V, window time.Duration, stamps ...Stamp) bool {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range stamps {
		if s.ChangedWithin(window, now) {
			delete(m.m, k)
			return false
		}
	}
	if m.m == nil {
		m.m = map[K]V{}
	}
	if len(m.m) >= max(m.max, 1) {
		clear(m.m)
	}
	m.m[k] = v
	return true
}

// Clear forgets every value.
func (m *Memo[K, V]) Clear() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.m)
}

// Len is how many values it keeps.
func (m *Memo[K, V]) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.m)
}
