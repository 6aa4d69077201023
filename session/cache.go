package session

import "sync"

// cache holds loaded things (sessions, indexes) by key. Loading happens
// outside its lock, once per key at a time: verifying a large log while
// loading one session never holds up another session.
type cache[T any] struct {
	mu      sync.Mutex
	items   map[string]T
	flights map[string]*flight[T]
}

// flight is one load in progress; others asking for its key wait on done.
type flight[T any] struct {
	done chan struct{}
	v    T
	err  error
}

func newCache[T any]() *cache[T] {
	return &cache[T]{items: map[string]T{}, flights: map[string]*flight[T]{}}
}

// get returns the item for key, loading it with load if it is not there.
// A failed load is not kept: the next get tries again.
func (c *cache[T]) get(key string, load func() (T, error)) (T, error) {
	c.mu.Lock()
	if v, ok := c.items[key]; ok {
		c.mu.Unlock()
		return v, nil
	}
	if f, ok := c.flights[key]; ok {
		c.mu.Unlock()
		<-f.done
		return f.v, f.err
	}
	f := &flight[T]{done: make(chan struct{})}
	c.flights[key] = f
	c.mu.Unlock()

	f.v, f.err = load()
	c.mu.Lock()
	delete(c.flights, key)
	if f.err == nil {
		c.items[key] = f.v
	}
	c.mu.Unlock()
	close(f.done)
	return f.v, f.err
}

// peek returns the item for key if it is loaded.
func (c *cache[T]) peek(key string) (T, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.items[key]
	return v, ok
}

// putIfAbsent stores v unless key holds something; it returns what key holds.
func (c *cache[T]) putIfAbsent(key string, v T) T {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.items[key]; ok {
		return old
	}
	c.items[key] = v
	return v
}

// all returns every loaded item.
func (c *cache[T]) all() []T {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]T, 0, len(c.items))
	for _, v := range c.items {
		out = append(out, v)
	}
	return out
}
