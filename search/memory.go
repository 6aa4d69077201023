package search

import "sync"

// Memory is what the server remembers of checks it made (segments
// checked, segments found to fit their log, directories tidied,
// identities read), shared by its searches. It holds at most
// MaxRemembered entries: past it, it starts again empty, which costs only
// checks made once more.
type Memory[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]V
}

// MaxRemembered bounds each Memory.
const MaxRemembered = 1 << 17

// Get is what was remembered for k.
func (c *Memory[K, V]) Get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

// Put remembers v for k.
func (c *Memory[K, V]) Put(k K, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= MaxRemembered {
		c.m = map[K]V{}
	}
	c.m[k] = v
}
