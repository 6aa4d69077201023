package sealedlog

import (
	"errors"
	"sync/atomic"
	"syscall"
	"testing"
)

// TestChangesCountsATakeBack: a unit whose second write is refused takes
// back its first: that log's Size goes back and its Changes count goes
// up, so a reader that kept bytes below the old Size knows they may be
// gone; appends that only grow a log leave the count as it was.
func TestChangesCountsATakeBack(t *testing.T) {
	var armed atomic.Bool
	var calls atomic.Int32
	js := newJStore(t, 2, JournalConfig{CheckpointEvery: -1, Gate: func() error {
		if armed.Load() && calls.Add(1) == 3 { // the unit's second write (the first ask is the journal's, before the unit)
			return syscall.EAGAIN
		}
		return nil
	}})
	js.appendDurable(0, 1)
	js.appendDurable(1, 1)
	first, second := js.logs[0], js.logs[1]
	size, changes := first.Size(), first.Changes()
	if err := AppendPair(first, line(2), second, line(2)); err != nil {
		t.Fatal(err)
	}
	if first.Changes() != changes || first.Size() <= size {
		t.Fatalf("an append changed the count (%d, was %d) or did not grow the log", first.Changes(), changes)
	}
	size = first.Size()
	armed.Store(true)
	if err := AppendPair(first, line(3), second, line(3)); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("a unit whose second write is refused: %v, want EAGAIN", err)
	}
	if first.Size() != size || first.Changes() != changes+1 {
		t.Fatalf("after the take-back: size %d (was %d), changes %d (was %d)", first.Size(), size, first.Changes(), changes)
	}
}
