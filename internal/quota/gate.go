package quota

import (
	"context"
	"runtime"
	"sync"
	"syscall"
)

// Searches are paced (issue 19, finding 9; search.Pace, in
// search/pace.go, is a search's side of it): one uid's parallel
// searches of a large session took the CPU every other user's sends
// needed. Three bounds, in Limits:
// Searches per uid (EAGAIN at once), ScanSlots server-wide (the others
// wait their turn), ScanBytes per search (its reply is cut and says so).

const (
	defaultSearchesPerUid = 2
	// defaultScanBytes: about 1.3 s of verifying at 190 MB/s a core, or
	// 7 s of indexing at 35 MB/s (docs/benchmarks.md), for one search.
	defaultScanBytes = 256 << 20
)

// setSearchLimits fills in the search bounds of c (0: the default).
func (l *Limits) setSearchLimits(c LimitConfig) {
	slots := c.SearchSlots
	if slots <= 0 {
		slots = max(1, runtime.NumCPU()/2)
	}
	perUid := c.SearchesPerUid
	if perUid <= 0 {
		perUid = defaultSearchesPerUid
	}
	l.Searches = New("searches", syscall.EAGAIN, perUid, max(16, 4*slots, perUid))
	l.ScanSlots = newScanGate(slots)
	l.ScanBytes = c.SearchScanBytes
	if l.ScanBytes <= 0 {
		l.ScanBytes = defaultScanBytes
	}
}

// ScanGate holds the server's scan slots and its searches' goroutines. A
// slot given back goes to the search that has waited longest (a channel's
// waiting senders are served in order), so searches take turns.
type ScanGate struct {
	slots   chan struct{}
	closing context.Context // done when the engine closes: every search stops
	close   context.CancelFunc
	running sync.WaitGroup
}

// newScanGate is a gate of n slots.
func newScanGate(n int) *ScanGate {
	ctx, cancel := context.WithCancel(context.Background())
	return &ScanGate{slots: make(chan struct{}, n), closing: ctx, close: cancel}
}

// Start runs a search's work in a goroutine of its own, with a context
// done when cancel is called (its reader left) or the engine closes.
func (g *ScanGate) Start(work func(ctx context.Context)) (cancel func()) {
	ctx, cancel := context.WithCancel(g.closing)
	g.running.Go(func() { work(ctx) })
	return cancel
}

// StopAll stops every search and waits for their goroutines: the engine
// then closes the store, which none reads any more.
func (g *ScanGate) StopAll() {
	g.close()
	g.running.Wait()
}

// Take waits for a slot, or for ctx to be done.
func (g *ScanGate) Take(ctx context.Context) error {
	select {
	case g.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Give gives back a slot Take held.
func (g *ScanGate) Give() { <-g.slots }
