package behind

import (
	"errors"
	"fmt"
)

// What the engine's tests see of the queue: its bookkeeping checked, its
// counts, and a smaller bound (a test cannot fill 16 MiB of failed
// values). Nothing in the server calls them.

// Counts is what waits to be written (of one session directory, or of
// all): values in all, values loose, and the loose values' bytes.
type Counts struct {
	Waiting, Loose, LooseBytes int
}

// Counts counts the values waiting for the session directory dir ("":
// for every session).
func (q *Queue) Counts(dir string) Counts {
	q.mu.Lock()
	defer q.mu.Unlock()
	var c Counts
	for d, m := range q.byDir {
		if dir != "" && d != dir {
			continue
		}
		for _, p := range m {
			c.Waiting++
			if p.loose != nil {
				c.Loose++
				c.LooseBytes += len(p.v.Data)
			}
		}
	}
	return c
}

// SetBound changes the bound of the loose values (MaxLoose,
// MaxLooseBytes); it takes effect at the next Release.
func (q *Queue) SetBound(values, bytes int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.maxLoose, q.maxLooseBytes = values, bytes
}

// Check verifies the queue's bookkeeping: each value waiting is filed
// under its own directory and name, no directory is left empty, the loose
// list holds only values waiting, each once, and looseBytes is their
// size. It returns what is wrong, nil when nothing is.
func (q *Queue) Check() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	var errs []error
	for dir, m := range q.byDir {
		if len(m) == 0 {
			errs = append(errs, fmt.Errorf("%s: an empty directory entry", dir))
		}
		for name, p := range m {
			if p.dir != dir || p.name != name {
				errs = append(errs, fmt.Errorf("%s/%s: filed under another name (%s)", dir, name, p.rel()))
			}
		}
	}
	seen := map[*pending]bool{}
	bytes := 0
	for e := q.loose.Front(); e != nil; e = e.Next() {
		p := e.Value.(*pending)
		if q.lookup(p.rel()) != p || p.loose != e || seen[p] {
			errs = append(errs, fmt.Errorf("%s: loose but not waiting, or twice", p.rel()))
		}
		seen[p] = true
		bytes += len(p.v.Data)
	}
	if bytes != q.looseBytes {
		errs = append(errs, fmt.Errorf("loose values %d bytes, counted %d", bytes, q.looseBytes))
	}
	return errors.Join(errs...)
}
