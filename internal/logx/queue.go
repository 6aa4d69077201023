package logx

import (
	"bytes"
	"fmt"
	"io"
	"sync"
	"time"
)

// Bounds of a Queue: what it holds for a writer that does not keep up,
// how long a line may wait for the lines after it, and how long Close
// waits for the writer below.
const (
	queueBytes = 1 << 20
	linger     = 10 * time.Millisecond
	flushLimit = time.Second
	keptBuffer = 64 << 10 // a buffer that grew past this is let go once written
	// pipeBuf is the most a write to a pipe puts in at once (PIPE_BUF):
	// the lines are written in pieces of at most this, each ending at a
	// line's end, so that another process writing to the same pipe (the
	// server's watchdog) never lands inside one of them.
	pipeBuf = 4096
)

// Queue is a writer that never waits for the one below it. The server's
// stderr is often a pipe or a terminal (`make run 2>&1 | tee log`, less,
// a terminal stopped with Ctrl+S): a write there blocks while the reader
// stalls, and a blocked log line would stall whatever logged it, the stop
// and its unmount too. Queue copies each write into a buffer that a
// goroutine of its own writes out; when more than queueBytes wait, new
// writes are dropped, and how many is said once the writer takes lines
// again. A write that fails (a reader gone: EPIPE) is dropped alike; the
// next one is tried all the same.
//
// The goroutine writes what came in the linger after the first line it
// was woken for, together (writeLines): a busy server logs lines by the thousand
// a second (a run's start and end), and a wakeup and a write each cost
// more than the line's formatting (docs/benchmarks.md, "The server's
// log lines").
type Queue struct {
	w       io.Writer
	mu      sync.Mutex
	buf     []byte // written and not taken by the writer yet
	spare   []byte // the buffer the writer wrote last, for the next lines
	size    int    // bytes queued and not written yet (buf and the writer's)
	dropped int    // writes dropped since the last report
	closed  bool   // Close was called: the writer goroutine ends when empty
	wake    chan struct{}
	closing chan struct{} // closed by Close: no more lingering
	done    chan struct{} // closed when the writer goroutine has ended
}

// NonBlocking returns a Queue that writes to w.
func NonBlocking(w io.Writer) *Queue {
	q := &Queue{w: w, wake: make(chan struct{}, 1), closing: make(chan struct{}), done: make(chan struct{})}
	go q.run()
	return q
}

// Write queues a copy of p, or drops it when the queue is full or closed,
// and never fails. Only a write to an empty queue wakes the writer.
func (q *Queue) Write(p []byte) (int, error) {
	q.mu.Lock()
	first := false
	switch {
	case q.closed || q.size+len(p) > queueBytes:
		q.dropped++
		first = q.dropped == 1 // to be said once the writer takes lines again
	default:
		first = len(q.buf) == 0
		q.buf = append(q.buf, p...)
		q.size += len(p)
	}
	q.mu.Unlock()
	if first {
		q.signal()
	}
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
	if !q.closed {
		q.closed = true
		close(q.closing)
	}
	q.mu.Unlock()
	select {
	case <-q.done:
	case <-time.After(flushLimit):
	}
	return nil
}

// run writes the queued lines in order until the queue is closed and
// empty: woken by a first line, it lingers for the lines after it, then
// writes them all at once.
func (q *Queue) run() {
	defer close(q.done)
	t := time.NewTimer(linger)
	t.Stop() // since Go 1.23 a Reset timer delivers no stale tick
	for {
		select {
		case <-q.wake:
			t.Reset(linger)
			select {
			case <-t.C:
			case <-q.closing:
			}
		case <-q.closing:
		}
		if !q.writeOut() {
			return
		}
	}
}

// writeOut writes what is queued, and the count of writes dropped since
// the last time; false once the queue is closed and empty.
func (q *Queue) writeOut() bool {
	q.mu.Lock()
	batch, dropped, closed := q.buf, q.dropped, q.closed
	q.buf, q.spare, q.dropped = q.spare[:0], nil, 0
	q.mu.Unlock()
	writeLines(q.w, batch)
	if dropped > 0 {
		fmt.Fprintf(q.w, "ctxfs: %d log writes dropped: the log's reader did not keep up\n", dropped)
	}
	q.mu.Lock()
	q.size -= len(batch) // counted until written: the bound holds what waits in all
	if cap(batch) <= keptBuffer {
		q.spare = batch[:0]
	}
	q.mu.Unlock()
	return !closed || len(batch) > 0 || dropped > 0
}

// writeLines writes b, whole lines, in pieces of at most pipeBuf bytes
// that end at a line's end; a line longer than pipeBuf is a piece of its
// own. A failure drops the piece: nothing else to do with it.
func writeLines(w io.Writer, b []byte) {
	for len(b) > 0 {
		n := len(b)
		if n > pipeBuf {
			n = bytes.LastIndexByte(b[:pipeBuf], '\n') + 1
			if n == 0 { // a line longer than pipeBuf
				if n = bytes.IndexByte(b, '\n') + 1; n == 0 {
					n = len(b)
				}
			}
		}
		w.Write(b[:n])
		b = b[n:]
	}
}
