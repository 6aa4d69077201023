package quota

import "sync"

// counted is each uid's use of a bound whose truth is in the store (the
// free trees' bytes and inodes, the names in the indexes): counted from
// the store the first time it is asked for, kept up to date by charges
// and give-backs after, and counted again once it is forgotten.
type counted[T any] struct {
	mu   sync.Mutex
	uses map[uint32]*use[T]
}

// use is one uid's use, counted once (known).
type use[T any] struct {
	mu    sync.Mutex
	known bool
	v     T
}

// of is uid's use, counted with count when it is not known; its lock is
// held on return.
func (c *counted[T]) of(uid uint32, count func() T) *use[T] {
	c.mu.Lock()
	u := c.uses[uid]
	if u == nil {
		if c.uses == nil {
			c.uses = map[uint32]*use[T]{}
		}
		u = &use[T]{}
		c.uses[uid] = u
	}
	c.mu.Unlock()
	u.mu.Lock()
	if !u.known {
		u.v = count()
		u.known = true
	}
	return u
}

// ever is uid's use, its lock held, when it was ever counted; nil when
// not (what is given back then needs no record: the count will find the
// store as it is).
func (c *counted[T]) ever(uid uint32) *use[T] {
	c.mu.Lock()
	u := c.uses[uid]
	c.mu.Unlock()
	if u != nil {
		u.mu.Lock()
	}
	return u
}
