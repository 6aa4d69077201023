package session

import (
	"os"
	"sync"
	"time"
)

// derivedRetryEvery is how often derived files whose last write failed are
// written again.
const derivedRetryEvery = time.Second

// derivedRetry keeps the derived files (state, updated_at, latest.md, …)
// whose last write failed (EMFILE, ENOSPC, …), with the value each should
// hold, and writes them again until it succeeds: a derived file always
// ends consistent with the logs, not only when its session loads again.
type derivedRetry struct {
	mu      sync.Mutex
	pending map[string]pendingValue // by store path
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// pendingValue is the value one derived file must still get.
type pendingValue struct {
	s           *sess
	name, value string
}

func newDerivedRetry() *derivedRetry {
	return &derivedRetry{pending: map[string]pendingValue{}, stop: make(chan struct{}), done: make(chan struct{})}
}

// failed records that writing value to s's file name failed; settled
// that the file now holds its latest value (a newer write supersedes an
// older failure).
func (d *derivedRetry) failed(s *sess, name, value string) {
	d.mu.Lock()
	d.pending[s.file(name)] = pendingValue{s, name, value}
	d.mu.Unlock()
}

func (d *derivedRetry) settled(s *sess, name string) {
	d.mu.Lock()
	delete(d.pending, s.file(name))
	d.mu.Unlock()
}

// holds reports whether a value of s waits to be written.
func (d *derivedRetry) holds(s *sess) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.pending {
		if p.s == s {
			return true
		}
	}
	return false
}

// run writes the pending values again every derivedRetryEvery until close.
func (d *derivedRetry) run() {
	defer close(d.done)
	t := time.NewTicker(derivedRetryEvery)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
		}
		d.mu.Lock()
		todo := make([]pendingValue, 0, len(d.pending))
		for _, p := range d.pending {
			todo = append(todo, p)
		}
		d.mu.Unlock()
		for _, p := range todo {
			p.s.fileMu.Lock()
			d.mu.Lock()
			cur, still := d.pending[p.s.file(p.name)]
			d.mu.Unlock()
			if still && cur.value == p.value { // not superseded meanwhile
				p.s.writeFileLocked(p.name, p.value)
			}
			p.s.fileMu.Unlock()
		}
	}
}

func (d *derivedRetry) close() {
	d.once.Do(func() { close(d.stop) })
	<-d.done
}

// writeFileLocked replaces one of the session's derived files (see
// replaceValue: atomic, not synced). A failure does not fail the run (the
// logs, which it is derived from, are durable already): it is reported on
// stderr for the operator, and the value is written again until it holds.
// Caller holds s.fileMu.
func (s *sess) writeFileLocked(name, value string) {
	if err := s.e.replaceValue(s.file(name), []byte(value), s.own); err != nil {
		os.Stderr.WriteString("ctxfs: " + s.ref.Rel() + "/" + name + ": " + err.Error() + " (written again in a moment)\n")
		s.e.derived.failed(s, name, value)
		return
	}
	s.e.derived.settled(s, name)
	s.e.changed(s.ref.Rel() + "/" + name)
}
