package fs

import (
	"runtime"
	"sync"
	"weak"
)

// weakTable maps keys to values that live as long as something else holds
// them (the node objects go-fuse keeps): an entry is dropped once its
// value is collected, unless another was made for the key since. So the
// table is bounded by what holds its values (identity.go, life.go).
type weakTable[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]weak.Pointer[V]
}

// get is k's value while something holds it, else a new one from make
// (called with the table's lock held).
func (t *weakTable[K, V]) get(k K, make func() *V) *V {
	t.mu.Lock()
	defer t.mu.Unlock()
	if v := t.m[k].Value(); v != nil {
		return v
	}
	if t.m == nil {
		t.m = map[K]weak.Pointer[V]{}
	}
	v := make()
	t.m[k] = weak.Make(v)
	runtime.AddCleanup(v, t.drop, k)
	return v
}

// held is k's value while something holds it, else nil.
func (t *weakTable[K, V]) held(k K) *V {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[k].Value()
}

// forget drops k's entry when it is v (not one made since): the next get
// makes a new value.
func (t *weakTable[K, V]) forget(k K, v *V) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m[k].Value() == v {
		delete(t.m, k)
	}
}

// drop forgets k's entry once its value is gone.
func (t *weakTable[K, V]) drop(k K) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if wp, ok := t.m[k]; ok && wp.Value() == nil {
		delete(t.m, k)
	}
}

// size is the number of entries (tests).
func (t *weakTable[K, V]) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
