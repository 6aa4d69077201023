package fs

import (
	"sync"
	"syscall"
	"testing"
	"time"
)

// heldDrop is a log's inode whose drops of pages wait until released, as
// the kernel's wait for a page under a READ does.
type heldDrop struct {
	mu      sync.Mutex
	offsets []int64
	entered chan struct{} // one value per drop begun
	release chan struct{} // closed to let every drop finish
}

func newHeldDrop() *heldDrop {
	return &heldDrop{entered: make(chan struct{}, 8), release: make(chan struct{})}
}

func (d *heldDrop) NotifyContent(off, sz int64) syscall.Errno {
	d.mu.Lock()
	d.offsets = append(d.offsets, off)
	d.mu.Unlock()
	d.entered <- struct{}{}
	<-d.release
	return 0
}

func (d *heldDrop) drops() []int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]int64(nil), d.offsets...)
}

// sized is a size function of tell for a log of n bytes.
func sized(n int64) func() (int64, bool) { return func() (int64, bool) { return n, true } }

// TestTellWaitsForDrop: a reply that would tell the kernel a log's size
// (a GETATTR's) while a drop of its end's pages is under way returns only
// after the drop: the kernel holds the old end's page until then, and
// would serve its zeros at the new size. It failed before 2026-12-05: the
// drop's mark was cleared as it began, and the second tell returned at
// once.
func TestTellWaitsForDrop(t *testing.T) {
	var e ends
	d := newHeldDrop()
	e.reading() // a READ: the kernel may hold the end's page
	first := make(chan bool)
	go func() { first <- e.tell(d, sized(5000)) }()
	<-d.entered
	second := make(chan bool)
	go func() { second <- e.tell(d, sized(6000)) }()
	select {
	case <-second:
		t.Fatal("a size was told while the end's pages were being dropped")
	case <-time.After(100 * time.Millisecond):
	}
	close(d.release)
	if !<-first {
		t.Fatal("the first tell dropped nothing")
	}
	if <-second {
		t.Fatal("the second tell dropped again, with no READ since the first drop")
	}
	if got := d.drops(); len(got) != 1 || got[0] != 0 {
		t.Fatalf("drops from %v, want one from 0", got)
	}
}

// TestTellDropsFromToldEnd: a drop goes from the page of the end told
// last; nothing is dropped with no READ since the last drop, nor for a
// size the kernel was told already, and a READ begun while a drop is
// under way has the next larger size drop again.
func TestTellDropsFromToldEnd(t *testing.T) {
	var e ends
	d := newHeldDrop()
	close(d.release)
	if e.tell(d, sized(100)) {
		t.Fatal("dropped with no READ")
	}
	e.reading()
	if !e.tell(d, sized(5000)) {
		t.Fatal("no drop after a READ")
	}
	<-d.entered
	if e.tell(d, sized(9000)) {
		t.Fatal("dropped again with no READ since")
	}
	e.reading()
	if e.tell(d, sized(5000)) {
		t.Fatal("dropped for the size told already")
	}
	if !e.tell(d, sized(9000)) {
		t.Fatal("a READ since the last drop, and no drop for a larger size")
	}
	<-d.entered
	if got := d.drops(); len(got) != 2 || got[0] != 0 || got[1] != 4096 {
		t.Fatalf("drops from %v, want from 0 then from 4096", got)
	}

	// A READ begun during a drop: its page may have been read before the
	// drop reached it, or after at an end the drop knew nothing of.
	held := newHeldDrop()
	e.reading()
	done := make(chan bool)
	go func() { done <- e.tell(held, sized(20000)) }()
	<-held.entered
	e.reading()
	close(held.release)
	<-done
	if !e.tell(held, sized(30000)) {
		t.Fatal("a READ during the drop, and no drop for a larger size")
	}
	if got := held.drops(); len(got) != 2 || got[1] != 16384 {
		t.Fatalf("drops from %v, want the second from 16384", got)
	}
}
