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
	u := c.entry(k)
	u.lock(count)
	return u
}

// entry is k's use, made (not counted yet) when k had none. A use is never
// dropped, so a caller may keep it and lock it by itself.
func (c *counted[K, T]) entry(k K) *use[T] {
	c.mu.Lock()
	defer c.mu.Unlock()
	u := c.uses[k]
	if u == nil {
		if c.uses == nil {
			c.uses = map[K]*use[T]{}
		}
		u = &use[T]{}
		c.uses[k] = u
	}
	return u
}

// lock takes u's lock, counted first with count when it is not known.
func (u *use[T]) lock(count func() T) {
	u.mu.Lock()
	if !u.known {
		u.v = count()
		u.known = true
	}
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
		takeOff(u, n)
	}
}

// takeOff takes n off u's count, its lock held, when it is known (one not
// counted yet will find the store as it is).
func takeOff(u *use[int64], n int64) {
	if u.known {
		u.v = max(u.v-n, 0)
	}
}
