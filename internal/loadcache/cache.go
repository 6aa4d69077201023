// Package loadcache holds things loaded from the store (the engine's
// sessions and indexes) by key: each loaded once at a time, held while
// used, the least recently used dropped beyond a bound.
//
// It owns only the bookkeeping of loading, holding and dropping. It never
// loads, verifies or closes anything itself (the caller's load and close
// functions do), and never touches the store.
package loadcache

import (
	"container/list"
	"errors"
	"sync"
	"time"
)

// Cache holds loaded things (sessions, indexes) by key. Loading happens
// outside its lock, once per key at a time: verifying a large log while
// loading one session never holds up another session.
//
// A cache with a bound keeps at most max items that nobody uses: each
// Acquire holds its item until its release, and when a load makes the
// cache larger than max, the least recently used items that are held by
// nobody and that idle says may go are closed and dropped (a session with
// a run, a temp session, are never dropped). Closing happens outside the
// lock but before the key can be loaded again: two loaded copies of one
// item never exist at once.
type Cache[T any] struct {
	max   int          // 0: unbounded
	idle  func(T) bool // may be dropped now (besides being held by nobody)
	close func(T)      // releases what a dropped item holds
	mu    sync.Mutex   // guards all below
	items map[string]*item[T]
	lru   *list.List // of *item, most recently used at the front
	// flights are loads and closes in progress; others asking for the key
	// wait on them.
	flights map[string]*flight[T]
}

type item[T any] struct {
	key  string
	v    T
	refs int
	elem *list.Element
}

// flight is one load or close in progress; others asking for its key wait
// on done.
type flight[T any] struct {
	done chan struct{}
	// gone, set by take, is what acquires that waited on this flight
	// return: the key's thing went away while they waited.
	gone error
}

// New is a cache of at most max unused items (0: unbounded); idle says
// whether an item may be dropped now, close releases what a dropped item
// holds (both may be nil).
func New[T any](max int, idle func(T) bool, close func(T)) *Cache[T] {
	return &Cache[T]{max: max, idle: idle, close: close, items: map[string]*item[T]{}, lru: list.New(), flights: map[string]*flight[T]{}}
}

// Acquire returns the item for key, loading it with load if it is not
// there, and holds it until release is called (exactly once). A failed
// load is not kept: the next acquire tries again.
func (c *Cache[T]) Acquire(key string, load func() (T, error)) (v T, release func(), err error) {
	for {
		c.mu.Lock()
		if it, ok := c.items[key]; ok {
			it.refs++
			c.lru.MoveToFront(it.elem)
			c.mu.Unlock()
			return it.v, c.releaser(it), nil
		}
		f, busy := c.flights[key]
		if !busy {
			break // c.mu still held
		}
		c.mu.Unlock()
		<-f.done
		if f.gone != nil {
			var zero T
			return zero, nil, f.gone
		}
		// Loaded, failed or closed: look again.
	}
	f := &flight[T]{done: make(chan struct{})}
	c.flights[key] = f
	c.mu.Unlock()

	v, err = load()
	c.mu.Lock()
	delete(c.flights, key)
	var it *item[T]
	if err == nil {
		it = &item[T]{key: key, v: v, refs: 1}
		it.elem = c.lru.PushFront(it)
		c.items[key] = it
	}
	victims := c.victimsLocked()
	c.mu.Unlock()
	close(f.done)
	c.drop(victims)
	if err != nil {
		return v, nil, err
	}
	return v, c.releaser(it), nil
}

func (c *Cache[T]) releaser(it *item[T]) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			it.refs--
			c.mu.Unlock()
		})
	}
}

// victimsLocked takes out of the cache the least recently used items that
// may go, until it holds at most max, and marks each key closing. Caller
// holds c.mu.
func (c *Cache[T]) victimsLocked() []*item[T] {
	if c.max <= 0 {
		return nil
	}
	var out []*item[T]
	for e := c.lru.Back(); e != nil && len(c.items) > c.max; {
		it := e.Value.(*item[T])
		e = e.Prev()
		if it.refs > 0 || !c.idle(it.v) {
			continue
		}
		c.lru.Remove(it.elem)
		delete(c.items, it.key)
		c.flights[it.key] = &flight[T]{done: make(chan struct{})}
		out = append(out, it)
	}
	return out
}

// drop closes victims, then lets their keys be loaded again.
func (c *Cache[T]) drop(victims []*item[T]) {
	for _, it := range victims {
		c.close(it.v)
		c.mu.Lock()
		f := c.flights[it.key]
		delete(c.flights, it.key)
		c.mu.Unlock()
		close(f.done)
	}
}

// Take gives fn the key to itself. The loaded item, if any, leaves the
// cache once nobody holds it (holders are waited for, up to wait; then
// Take fails with ErrBusy and changes nothing) and is handed to fn, which
// closes it or puts it back. Acquires of key that come meanwhile wait until fn is
// done; when fn reports the key gone they fail with gone, so a request
// that raced with a removal is refused rather than served by a new copy.
func (c *Cache[T]) Take(key string, wait time.Duration, gone error, fn func(v T, loaded bool) (bool, error)) error {
	c.mu.Lock()
	for {
		f, busy := c.flights[key]
		if !busy {
			break
		}
		c.mu.Unlock()
		<-f.done
		c.mu.Lock()
	}
	f := &flight[T]{done: make(chan struct{})}
	c.flights[key] = f
	it := c.items[key]
	if it != nil {
		c.lru.Remove(it.elem)
		delete(c.items, key)
	}
	for deadline := time.Now().Add(wait); it != nil && it.refs > 0; {
		if time.Now().After(deadline) {
			it.elem = c.lru.PushFront(it)
			c.items[key] = it
			delete(c.flights, key)
			c.mu.Unlock()
			close(f.done)
			return ErrBusy
		}
		c.mu.Unlock()
		time.Sleep(time.Millisecond)
		c.mu.Lock()
	}
	c.mu.Unlock()
	var v T
	if it != nil {
		v = it.v
	}
	isGone, err := fn(v, it != nil)
	c.mu.Lock()
	delete(c.flights, key)
	if isGone {
		f.gone = gone
	}
	c.mu.Unlock()
	close(f.done)
	return err
}

// Hold runs fn with key to itself, without loading it: fn gets the
// loaded item, held as acquire holds it (so it is not dropped meanwhile),
// or, when key is not loaded, key marked busy, so that no load, close or
// Take of it happens until fn returns. fn must not acquire or take key.
func (c *Cache[T]) Hold(key string, fn func(v T, loaded bool)) {
	c.mu.Lock()
	for {
		if it, ok := c.items[key]; ok {
			it.refs++
			c.mu.Unlock()
			defer c.releaser(it)()
			fn(it.v, true)
			return
		}
		f, busy := c.flights[key]
		if !busy {
			break // c.mu still held
		}
		c.mu.Unlock()
		<-f.done
		c.mu.Lock()
	}
	f := &flight[T]{done: make(chan struct{})}
	c.flights[key] = f
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.flights, key)
		c.mu.Unlock()
		close(f.done)
	}()
	var zero T
	fn(zero, false)
}

// ErrBusy is Take's refusal when the key stays in use.
var ErrBusy = errors.New("in use")

// Peek returns the item for key if it is loaded (without holding it).
func (c *Cache[T]) Peek(key string) (T, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	it, ok := c.items[key]
	if !ok {
		var zero T
		return zero, false
	}
	return it.v, true
}

// PutIfAbsent stores v unless key holds something; it returns what key
// holds. What is put this way is held by nobody and goes only as idle says.
func (c *Cache[T]) PutIfAbsent(key string, v T) T {
	c.mu.Lock()
	defer c.mu.Unlock()
	if it, ok := c.items[key]; ok {
		return it.v
	}
	it := &item[T]{key: key, v: v}
	it.elem = c.lru.PushFront(it)
	c.items[key] = it
	return v
}

// Len is how many items are loaded.
func (c *Cache[T]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.items)
}

// All returns every loaded item.
func (c *Cache[T]) All() []T {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]T, 0, len(c.items))
	for _, it := range c.items {
		out = append(out, it.v)
	}
	return out
}

// Each calls fn with every loaded item and its key, under the cache's
// lock: fn must not call the cache.
func (c *Cache[T]) Each(fn func(key string, v T)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, it := range c.items {
		fn(key, it.v)
	}
}
