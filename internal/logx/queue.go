package logx

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// Bounds of a Queue: what it holds for a writer that does not keep up, and
// how long Close waits for it.
const (
	queueBytes = 1 << 20
	flushLimit = time.Second
)

// Queue is a writer that never waits for the one below it. The server's
// stderr is often a pipe or a terminal (`make run 2>&1 | tee log`, less,
// a terminal stopped with Ctrl+S): a write there blocks while the reader
// stalls, and a blocked log line would stall whatever logged it, the stop
// and its unmount too. Queue hands each write to a goroutine that writes
// it; when more than queueBytes wait, new writes are dropped, and how many
// is said once the writer takes lines again. A write that fails (a reader
// gone: EPIPE) is dropped alike; the next one is tried all the same.
type Queue struct {
	w       io.Writer
	mu      sync.Mutex
	queued  [][]byte
	size    int  // bytes queued and not written yet
	dropped int  // writes dropped since the last report
	closed  bool // Close was called: the writer goroutine ends when empty
	wake    chan struct{}
	done    chan struct{} // closed when the writer goroutine has ended
}

// NonBlocking returns a Queue that writes to w.
func NonBlocking(w io.Writer) *Queue {
	q := &Queue{w: w, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go q.run()
	return q
}

// Write queues a copy of p, or drops it when the queue is full or closed,
// and never fails.
func (q *Queue) Write(p []byte) (int, error) {
	q.mu.Lock()
	switch {
	case q.closed || q.size+len(p) > queueBytes:
		q.dropped++
	default:
		q.queued = append(q.queued, append([]byte(nil), p...))
		q.size += len(p)
	}
	q.mu.Unlock()
	q.signal()
	return len(p), nil
}

func (q *Queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Close writes out what is queued, waiting at most flushLimit for the
// writer below (which may be stalled for good), and drops what comes
// after.
func (q *Queue) Close() error {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
	select {
	case <-q.done:
	case <-time.After(flushLimit):
	}
	return nil
}

// run writes the queued lines in order until the queue is closed and
// empty.
func (q *Queue) run() {
	defer close(q.done)
	for {
		q.mu.Lock()
		batch, dropped, closed := q.queued, q.dropped, q.closed
		q.queued, q.dropped = nil, 0
		q.mu.Unlock()
		written := 0
		for _, p := range batch {
			q.w.Write(p) // a failure drops the line: nothing else to do with it
			written += len(p)
		}
		q.mu.Lock()
		q.size -= written // counted until written: the bound holds what waits in all
		q.mu.Unlock()
		if dropped > 0 {
			fmt.Fprintf(q.w, "ctxfs: %d log writes dropped: the log's reader did not keep up\n", dropped)
		}
		if closed && len(batch) == 0 {
			return
		}
		if len(batch) == 0 {
			<-q.wake
		}
	}
}
