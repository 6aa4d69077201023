// Package gopool runs functions on goroutines that are kept for the next
// one once they return.
//
// A goroutine starts with a small stack and copies it each time it grows.
// The server's connections and runs each used to get a new goroutine,
// whose stack then grew two or three times on the way through a request
// (peer credentials, JSON, the session engine), a cost a send could see
// (docs/benchmarks.md#send-path). A goroutine kept here keeps
// its grown stack (until the runtime shrinks it at a collection).
//
// Nothing is bounded here: each caller bounds what it starts (the
// sockets' per-uid connection quota, the per-uid run quota). Idle
// goroutines leave after idleFor, so a burst leaves nothing behind.
package gopool

import (
	"sync"
	"time"
)

var (
	mu   sync.Mutex
	idle []chan func() // goroutines waiting for a function, newest last
	// idleFor is how long a goroutine waits for its next function (a
	// variable for the tests).
	idleFor = 10 * time.Second
)

// Go runs f on a goroutine of the pool, or on a new one when none is
// idle. Like the go statement, it never waits for f.
func Go(f func()) {
	mu.Lock()
	if n := len(idle); n > 0 {
		ch := idle[n-1]
		idle = idle[:n-1]
		mu.Unlock()
		ch <- f // buffered: never blocks
		return
	}
	mu.Unlock()
	go worker(f)
}

func worker(f func()) {
	ch := make(chan func(), 1)
	t := time.NewTimer(idleFor)
	defer t.Stop()
	for {
		f()
		f = nil
		mu.Lock()
		idle = append(idle, ch)
		wait := idleFor
		mu.Unlock()
		t.Reset(wait)
		select {
		case f = <-ch:
		case <-t.C:
			if !leave(ch) {
				f = <-ch // handed a function as the timer fired
			}
		}
		if f == nil {
			return
		}
	}
}

// leave takes ch off the idle list; false when Go took it first (and so
// sends it a function).
func leave(ch chan func()) bool {
	mu.Lock()
	defer mu.Unlock()
	for i, c := range idle {
		if c == ch {
			idle = append(idle[:i], idle[i+1:]...)
			return true
		}
	}
	return false
}
