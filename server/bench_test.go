package server

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/layout"
)

// BenchmarkHoldings reports what the engine holds (descriptors, resident
// memory) with 100,000 sessions each touched once (a status request loads
// it: 95,000 bare session directories, as BenchmarkSendLatency makes them,
// and 5,000 real ones, whose logs hold descriptors while loaded), and then
// with 1,000 idle socket connections more. The figures are absolute: what
// matters is that they stay flat as sessions grow (the session cache's
// bound: quota.SessionBudget, four descriptors each), not a ratio.
func BenchmarkHoldings(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root (sessions of uid 0, sockets under a root-owned store)")
	}
	base := b.TempDir()
	root, store := filepath.Join(base, "ctx"), filepath.Join(base, "store")
	os.MkdirAll(filepath.Join(root, "agent", "coder.d"), 0o755)
	e, err := session.Open(session.Config{Store: store, Root: root})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	root0 := layout.Caller{Uid: 0, Gid: 0}
	ct := layout.Container{Home: "home/0", Kind: abi.KindAgent, Owner: "coder"}
	parallel(b, 5000, func(i int) error {
		return e.CreateSession(root0, layout.Ref{Container: ct, Name: "real-" + strconv.Itoa(i)})
	})
	bare := filepath.Join(store, "home/0/agent/coder/session")
	parallel(b, 95000, func(i int) error { return os.Mkdir(filepath.Join(bare, "bare-"+strconv.Itoa(i)), 0o700) })
	fds0, rss0 := holdings(b)
	t0 := time.Now()
	parallel(b, 100000, func(i int) error { // parallel takes i in about this order
		name := "bare-" + strconv.Itoa(i) // the real ones last: the cache then holds them
		if i >= 95000 {
			name = "real-" + strconv.Itoa(i-95000)
		}
		req, _ := proto.ParseRequest([]byte(fmt.Sprintf(`{"op":"status","session":%q}`, name)))
		_, err := e.Begin(context.Background(), root0, session.Target{Kind: abi.KindAgent, Owner: "coder"}, req)
		return err
	})
	fds1, rss1 := holdings(b)
	b.Logf("100,000 sessions touched in %v", time.Since(t0).Round(time.Millisecond))
	socks, err := ServeSockets(e, root, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer socks.Close()
	var conns []net.Conn
	for i := 0; i < 1000; i++ {
		c, err := net.Dial("unix", filepath.Join(root, "agent", "coder.sock"))
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
	}
	time.Sleep(200 * time.Millisecond) // accepted
	fds2, rss2 := holdings(b)
	for _, c := range conns {
		c.Close()
	}
	for i := 0; i < b.N; i++ {
	}
	b.ReportMetric(float64(quota.SessionBudget()), "sessions-kept")
	b.ReportMetric(float64(fds0), "fds-before")
	b.ReportMetric(float64(fds1), "fds-100k-sessions")
	b.ReportMetric(float64(fds2), "fds-+1000-conns")
	b.ReportMetric(float64(rss0)/1024, "MiB-before")
	b.ReportMetric(float64(rss1)/1024, "MiB-100k-sessions")
	b.ReportMetric(float64(rss2)/1024, "MiB-+1000-conns")
}

// holdings is this process's open descriptors and resident memory (KiB).
func holdings(b *testing.B) (fds, rssKB int) {
	runtime.GC()
	ents, _ := os.ReadDir("/proc/self/fd")
	st, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			rssKB, _ = strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	return len(ents), rssKB
}

// parallel runs do(0..n-1) on a few workers and fails on the first error.
func parallel(b *testing.B, n int, do func(i int) error) {
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	workers := 4 * runtime.NumCPU()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				if err := do(i); err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}
