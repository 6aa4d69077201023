package loadcache

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type thing struct {
	key    string
	closed atomic.Bool
}

// Concurrent acquires of one key load it once, and all get that copy.
func TestAcquireLoadsOnce(t *testing.T) {
	c := New[*thing](0, nil, nil)
	var loads atomic.Int32
	var wg sync.WaitGroup
	got := make([]*thing, 16)
	for i := range got {
		wg.Go(func() {
			v, release, err := c.Acquire("a", func() (*thing, error) {
				loads.Add(1)
				time.Sleep(10 * time.Millisecond)
				return &thing{key: "a"}, nil
			})
			if err != nil {
				t.Error(err)
				return
			}
			defer release()
			got[i] = v
		})
	}
	wg.Wait()
	if loads.Load() != 1 {
		t.Fatalf("loaded %d times, want once", loads.Load())
	}
	for _, v := range got {
		if v != got[0] {
			t.Fatal("two copies of one key were handed out")
		}
	}
}

// A failed load is not kept: the next acquire loads again.
func TestFailedLoadNotKept(t *testing.T) {
	c := New[*thing](0, nil, nil)
	boom := errors.New("boom")
	if _, _, err := c.Acquire("a", func() (*thing, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
	v, release, err := c.Acquire("a", func() (*thing, error) { return &thing{key: "a"}, nil })
	if err != nil || v == nil {
		t.Fatalf("second acquire: %v %v", v, err)
	}
	release()
}

// Beyond the bound, the least recently used item nobody holds and idle
// allows is closed and dropped; a held one, or one idle refuses, stays.
func TestBoundDropsLeastRecentlyUsed(t *testing.T) {
	c := New[*thing](3, func(v *thing) bool { return v.key != "pinned" }, func(v *thing) { v.closed.Store(true) })
	load := func(k string) *thing {
		v, release, err := c.Acquire(k, func() (*thing, error) { return &thing{key: k}, nil })
		if err != nil {
			t.Fatal(err)
		}
		release()
		return v
	}
	pinned, a, b := load("pinned"), load("a"), load("b")
	load("a") // a is now more recent than b
	load("c")
	if !b.closed.Load() || a.closed.Load() || pinned.closed.Load() {
		t.Fatalf("closed: pinned %v a %v b %v; want only b", pinned.closed.Load(), a.closed.Load(), b.closed.Load())
	}
	if _, ok := c.Peek("b"); ok {
		t.Fatal("b still loaded after it was dropped")
	}
	if c.Len() != 3 {
		t.Fatalf("%d loaded, want 3 (pinned, a, c)", c.Len())
	}
}

// Take waits for holders up to its wait, then fails with ErrBusy and
// changes nothing; acquires that waited on a Take that reports the key
// gone fail with its error.
func TestTakeBusyAndGone(t *testing.T) {
	c := New[*thing](0, nil, nil)
	v, release, _ := c.Acquire("a", func() (*thing, error) { return &thing{key: "a"}, nil })
	err := c.Take("a", 20*time.Millisecond, nil, func(*thing, bool) (bool, error) {
		t.Error("fn ran while the key was held")
		return false, nil
	})
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("Take of a held key: %v, want ErrBusy", err)
	}
	if got, ok := c.Peek("a"); !ok || got != v {
		t.Fatal("a refused Take changed the cache")
	}
	release()
	gone := errors.New("gone")
	inFn, done := make(chan struct{}), make(chan error)
	go func() {
		done <- c.Take("a", time.Second, gone, func(got *thing, loaded bool) (bool, error) {
			if !loaded || got != v {
				t.Error("Take did not hand over the loaded item")
			}
			close(inFn)
			time.Sleep(20 * time.Millisecond)
			return true, nil
		})
	}()
	<-inFn
	if _, _, err := c.Acquire("a", func() (*thing, error) { return &thing{}, nil }); !errors.Is(err, gone) {
		t.Fatalf("acquire during a Take that removed the key: %v, want gone", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Hold of a key not loaded keeps loads of it out until it returns.
func TestHoldKeepsLoadsOut(t *testing.T) {
	c := New[*thing](0, nil, nil)
	var order []string
	var mu sync.Mutex
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	held := make(chan struct{})
	go c.Hold("a", func(_ *thing, loaded bool) {
		if loaded {
			t.Error("Hold of an unloaded key says loaded")
		}
		close(held)
		time.Sleep(20 * time.Millisecond)
		note("hold")
	})
	<-held
	_, release, err := c.Acquire("a", func() (*thing, error) { note("load"); return &thing{}, nil })
	if err != nil {
		t.Fatal(err)
	}
	release()
	if len(order) != 2 || order[0] != "hold" {
		t.Fatalf("order %v, want the load after the hold", order)
	}
}
