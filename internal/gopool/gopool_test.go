package gopool

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Functions run one after another reuse a goroutine; functions run at
// once each get their own; idle goroutines leave after idleFor.
func TestGoReusesAndLeaves(t *testing.T) {
	mu.Lock()
	idleFor = 200 * time.Millisecond
	mu.Unlock()
	base := runtime.NumGoroutine()
	for i := 0; i < 1000; i++ {
		done := make(chan struct{})
		Go(func() { close(done) })
		<-done
	}
	// A function's goroutine is idle again a moment after it returns: a
	// few may start meanwhile, never one per function.
	if n := runtime.NumGoroutine() - base; n > 10 {
		t.Fatalf("%d goroutines for 1000 functions run in turn", n)
	}
	var ran atomic.Int32
	var wg sync.WaitGroup
	release := make(chan struct{})
	for i := 0; i < 20; i++ {
		wg.Add(1)
		Go(func() { defer wg.Done(); ran.Add(1); <-release })
	}
	for deadline := time.Now().Add(5 * time.Second); ran.Load() < 20; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 20 functions started at once", ran.Load())
		}
	}
	close(release)
	wg.Wait()
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > base; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left after idleFor, want none", runtime.NumGoroutine()-base)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(idle) != 0 {
		t.Fatalf("%d idle left", len(idle))
	}
}
