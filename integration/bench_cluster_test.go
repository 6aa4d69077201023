package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/cluster/lease"
)

// The cluster's benchmarks (SPEC 19, issue 25), each beside its reference
// measured in the same run: durable sends on a distributed filesystem
// against that filesystem's own append+fdatasync loop; a failover against
// the lease's TTL; the wait of a reader on another host for a new line
// against a reader on the writer's own mount.

// BenchmarkClusterDurableSends: sends per second with debug/echo from 16
// clients (each its own session) on a store on MooseFS (two mfsmount
// clients of one volume, the hosts' stores), through one host (the
// writer) and through two (half the clients on a follower, relayed over
// TLS), beside MooseFS's own loop of 200-byte appends each followed by
// fdatasync on the same volume, run for 0.5 s before and after. It also
// reports what the sends asked of the writer's MooseFS client, a send at
// a time: the FUSE requests it served and the packets it sent to the
// master (its own counters: mfsCounters), beside the loop's.
func BenchmarkClusterDurableSends(b *testing.B) {
	m := startMooseFS(b)
	c := newClusterOn(b, []string{filepath.Join(m.a, "store"), filepath.Join(m.b, "store")}, lease.DefaultTTL, nil, "a", "b")
	w := c.waitWriter("", 20*time.Second)
	hosts := []*clusterHost{w}
	for _, h := range c.hosts {
		if h != w {
			hosts = append(hosts, h)
		}
	}
	writerMnt := map[string]string{"a": m.a, "b": m.b}[w.name]
	time.Sleep(2100 * time.Millisecond) // definitions older than the racy window (BenchmarkDurableSends)
	for _, n := range []int{1, 2} {
		b.Run(fmt.Sprintf("hosts=%d/clients=16", n), func(b *testing.B) {
			b.StopTimer()
			loopOps, loopMaster, before := mfsLoopCounts(b, writerMnt)
			ops0, master0 := mfsCounters(b, writerMnt)
			run := strconv.FormatInt(time.Now().UnixNano(), 36)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.StartTimer()
			t0 := time.Now()
			for cl := range 16 {
				h := hosts[cl%n]
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						fr := h.srv.mustRequest("coder", fmt.Sprintf(`{"op":"send","id":"c%s-%d","session":"h%d-s%d","input":"%0180d"}`, run, i, n, cl, i))
						if len(fr) == 0 || fr[len(fr)-1]["type"] != "done" {
							b.Errorf("send through %s: %v", h.name, fr)
							return
						}
					}
				}()
			}
			wg.Wait()
			el := time.Since(t0)
			b.StopTimer()
			ops1, master1 := mfsCounters(b, writerMnt)
			after := syncRate(b, filepath.Join(writerMnt, "store"), 500*time.Millisecond)
			limit := (before + after) / 2
			sends := float64(b.N) / el.Seconds()
			b.ReportMetric(sends, "sends/s")
			b.ReportMetric(limit, "mfs-syncs/s")
			b.ReportMetric(sends/limit, "sends/syncs")
			b.ReportMetric(float64(ops1-ops0)/float64(b.N), "mfs-ops/send")
			b.ReportMetric(float64(master1-master0)/float64(b.N), "mfs-master/send")
			b.ReportMetric(loopOps, "mfs-ops/sync")
			b.ReportMetric(loopMaster, "mfs-master/sync")
		})
	}
}

// BenchmarkClusterFailover: the time from a SIGKILL of the writer to the
// first send acknowledged through the other host (a client sending every
// 20 ms), with the default lease TTL: TTL, then the campaign, the fence
// and the replay. Reported in seconds and as a ratio of the TTL.
func BenchmarkClusterFailover(b *testing.B) {
	c := newTestCluster(b, lease.DefaultTTL, nil, "a", "b")
	var took []time.Duration
	for i := 0; i < b.N; i++ {
		w := c.waitWriter("", 30*time.Second)
		var other *clusterHost
		for _, h := range c.hosts {
			if h != w {
				other = h
			}
		}
		other.srv.mustRequest("coder", fmt.Sprintf(`{"op":"send","id":"f%d-warm","session":"f","input":"before"}`, i))
		killed := time.Now()
		dead := w.srv.crash()
		for j := 0; ; j++ {
			fr, err := other.srv.requestWithin("coder", fmt.Sprintf(`{"op":"send","id":"f%d-%d","session":"f","input":"after"}`, i, j), 10*time.Second)
			if err == nil && len(fr) > 0 && fr[0]["type"] == "start" {
				break
			}
			if time.Since(killed) > 60*time.Second {
				b.Fatalf("no takeover 60 s after the kill: %v %v", fr, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		took = append(took, time.Since(killed))
		<-dead
		w.srv.start()
		waitMounted(b, w.srv)
	}
	mean := time.Duration(0)
	for _, d := range took {
		mean += d / time.Duration(len(took))
	}
	b.ReportMetric(mean.Seconds(), "failover-s")
	b.ReportMetric(lease.DefaultTTL.Seconds(), "ttl-s")
	b.ReportMetric(mean.Seconds()/lease.DefaultTTL.Seconds(), "failover/ttl")
}

// BenchmarkClusterLineWait: how long a reader polling a session's
// messages.jsonl every 10 ms (tail -f's way on FUSE) waits for a send's
// line once the send has returned (its done frame read), on a follower's mount (the
// follower's poller, 200 ms, announces the writer's changes) and on the
// writer's own mount (its engine announces them at once): p50 and p99 of
// each.
func BenchmarkClusterLineWait(b *testing.B) {
	c := newTestCluster(b, 2*time.Second, nil, "a", "b")
	w := c.waitWriter("", 20*time.Second)
	f := c.follower(w)
	w.srv.send("lw", "lw-0", "first")
	waits := map[string][]time.Duration{}
	for i := 0; i < b.N; i++ {
		tag := fmt.Sprintf("line-%d-%d", i, time.Now().UnixNano())
		seen := map[string]chan time.Time{"follower": make(chan time.Time, 1), "writer": make(chan time.Time, 1)}
		var wg sync.WaitGroup
		for who, h := range map[string]*clusterHost{"follower": f, "writer": w} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := h.srv.mnt("home/0/agent/coder/session/lw/messages.jsonl")
				for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
					if data, _ := os.ReadFile(p); strings.Contains(string(data), tag) {
						seen[who] <- time.Now()
						return
					}
				}
			}()
		}
		w.srv.send("lw", fmt.Sprintf("lw-%d", i+1), tag)
		started := time.Now()
		wg.Wait()
		for who, ch := range seen {
			select {
			case at := <-ch:
				d := at.Sub(started)
				if d < 0 {
					d = 0
				}
				waits[who] = append(waits[who], d)
			default:
				b.Fatalf("the %s's reader never saw %s", who, tag)
			}
		}
	}
	for who, ds := range waits {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, who+"-p50-ms")
		b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds())/1000, who+"-p99-ms")
	}
}
