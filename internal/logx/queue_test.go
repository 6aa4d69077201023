package logx

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a writer the test can read while the queue writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines reach the writer whole and in order, all of them by Close.
func TestQueueKeepsOrder(t *testing.T) {
	var out lockedBuffer
	q := NonBlocking(&out)
	var want strings.Builder
	for i := 0; i < 1000; i++ {
		line := fmt.Sprintf("line %d\n", i)
		want.WriteString(line)
		q.Write([]byte(line))
	}
	q.Close()
	if out.String() != want.String() {
		t.Fatalf("the writer got %d bytes, want the %d written, in order", len(out.String()), want.Len())
	}
}

// A reader that stops reading (a pipe's: tee stopped, a terminal held by
// Ctrl+S) never blocks a write: past the queue's bound writes are dropped,
// and counted once the reader takes lines again. Close returns although
// the writer below is stuck.
func TestQueueNeverWaitsForAStalledReader(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	q := NonBlocking(w)
	line := []byte(strings.Repeat("x", 4095) + "\n")
	wrote := make(chan struct{})
	go func() {
		for i := 0; i < 4*queueBytes/len(line); i++ { // four times the bound, the pipe's 64 KiB besides
			q.Write(line)
		}
		close(wrote)
	}()
	select {
	case <-wrote:
	case <-time.After(20 * time.Second):
		t.Fatal("writes to a queue whose reader stalled blocked")
	}
	q.Write([]byte("last\n")) // dropped too: the queue is full
	got := make(chan string)
	go func() { b, _ := io.ReadAll(r); got <- string(b) }()
	q.Close()
	<-q.done // Close waits a second at most: the test waits for the whole flush
	w.Close()
	out := <-got
	if !strings.HasSuffix(out, " log writes dropped: the log's reader did not keep up\n") {
		t.Errorf("the output does not end with the count of dropped writes: %q", out[max(0, len(out)-200):])
	}
	if n := strings.Count(out, string(line)); n == 0 || n*len(line) > queueBytes+1<<16 {
		t.Errorf("%d whole lines got through; want some, at most the queue's bound and a pipe's", n)
	}
}

// A reader that is gone (EPIPE) changes nothing for the writers.
func TestQueueToAClosedPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	defer w.Close()
	q := NonBlocking(w)
	for i := 0; i < 100; i++ {
		if n, err := q.Write([]byte("lost\n")); n != 5 || err != nil {
			t.Fatalf("write: %d, %v", n, err)
		}
	}
	q.Close()
}

// countingWriter counts the writes it gets.
type countingWriter struct {
	lockedBuffer
	writes int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.writes++
	c.mu.Unlock()
	return c.lockedBuffer.Write(p)
}

func (c *countingWriter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes
}

// Lines that come within the linger of each other reach the writer in one
// write, not one each; and a lone line is written within the linger, not
// only at Close.
func TestQueueWritesLinesTogether(t *testing.T) {
	var out countingWriter
	q := NonBlocking(&out)
	defer q.Close()
	var want strings.Builder
	for i := 0; i < 1000; i++ {
		line := fmt.Sprintf("line %d\n", i)
		want.WriteString(line)
		q.Write([]byte(line))
		if i%100 == 0 {
			time.Sleep(time.Millisecond) // a writer that is woken between lines
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for out.String() != want.String() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s the writer has %d bytes of the %d queued, without a Close", len(out.String()), want.Len())
		}
		time.Sleep(linger)
	}
	// Ten pauses of a millisecond within a linger of ten: a loaded machine
	// may split the lines a few times more, never a write a line.
	if n := out.count(); n > 20 {
		t.Errorf("1000 lines took %d writes; want them gathered (a few)", n)
	}
	q.Write([]byte("lone\n"))
	start := time.Now()
	for !strings.HasSuffix(out.String(), "lone\n") {
		if time.Since(start) > 10*time.Second {
			t.Fatal("a lone line was not written within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// sizedWriter keeps each write apart.
type sizedWriter struct {
	mu     sync.Mutex
	writes [][]byte
}

func (w *sizedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, append([]byte(nil), p...))
	return len(p), nil
}

// The lines gathered are written in pieces a pipe takes whole (at most
// PIPE_BUF, each ending at a line's end; a longer line alone), so that
// another process's writes to the same pipe never land inside a line.
func TestQueueWritesWholeLinesAPipeTakesAtOnce(t *testing.T) {
	var out sizedWriter
	q := NonBlocking(&out)
	var want strings.Builder
	for i := 0; i < 500; i++ {
		line := fmt.Sprintf("line %d %s\n", i, strings.Repeat("x", i%97))
		if i == 250 {
			line = strings.Repeat("y", 3*pipeBuf) + "\n" // longer than a pipe takes at once
		}
		want.WriteString(line)
		q.Write([]byte(line))
	}
	q.Close()
	var got strings.Builder
	for _, w := range out.writes {
		got.Write(w)
		if len(w) == 0 || w[len(w)-1] != '\n' {
			t.Errorf("a write of %d bytes does not end at a line's end", len(w))
		}
		if len(w) > pipeBuf && strings.Count(string(w), "\n") != 1 {
			t.Errorf("a write of %d bytes, more than a pipe takes at once, holds %d lines", len(w), strings.Count(string(w), "\n"))
		}
	}
	if got.String() != want.String() {
		t.Fatalf("the writes hold %d bytes, want the %d queued, in order", got.Len(), want.Len())
	}
	if len(out.writes) >= 500 {
		t.Errorf("500 lines in %d writes: not gathered", len(out.writes))
	}
}
