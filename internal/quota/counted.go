package quota

import "sync"

// counted is each key's use of a bound whose truth is in the store (a
// uid's bytes and inodes in the free trees, a home's or a space's names in
// its indexes): counted from the store the first time it is asked for,
// kept up to date by charges and give-backs after, and counted again once
// it is forgotten.
type counted[K comparable, T any] struct {
	mu   sync.Mutex
	uses map[K]*use[T]
}

// use is one key's use, counted once (known).
type use[T any] struct {
	mu    sync.Mutex
	known bool
	v     T
}

// of is k's use, counted with count when it is not known; its lock is
// held on return.
func (c *counted[K, T]) of(k K, count func() T) *use[T] {
	c.mu.Lock()
	u := c.uses[k]
	if u == nil {
		if c.uses == nil {
			c.uses = map[K]*use[T]{}
		}
		u = &use[T]{}
		c.uses[k] = u
	}
	c.mu.Unlock()
	u.mu.Lock()
	if !u.known {
		u.v = count()
		u.known = true
	}
	return u
}

// ever is k's use, its lock held, when it was ever counted; nil when
// not (what is given back then needs no record: the count will find the
// store as it is).
func (c *counted[K, T]) ever(k K) *use[T] {
	c.mu.Lock()
	u := c.uses[k]
	c.mu.Unlock()
	if u != nil {
		u.mu.Lock()
	}
	return u
}

// give takes n off k's count (what was given back). A key not counted
// yet is left so: its count will find the store as it is.
func give[K comparable](c *counted[K, int64], k K, n int64) {
	if u := c.ever(k); u != nil {
		defer u.mu.Unlock()
		if u.known {
			u.v = max(u.v-n, 0)
		}
	}
}
