package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// benchServer is newServer for benchmarks.
func benchServer(b *testing.B) *server { return newServer(b) }

// BenchmarkDurableSends: sends per second with debug/echo, 1 and 16
// concurrent clients, beside the machine's own limit measured in the same
// run on the same disk: a loop of 200-byte appends each followed by
// fdatasync. Read sends/s against syncs/s.
func BenchmarkDurableSends(b *testing.B) {
	b.Run("limit=fdatasync-200B", func(b *testing.B) {
		f, err := os.Create(filepath.Join(b.TempDir(), "raw.jsonl"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		line := make([]byte, 200)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			f.Write(line)
			unix.Fdatasync(int(f.Fd()))
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	})
	for _, clients := range []int{1, 16} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			s := benchServer(b)
			var n atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for c := 0; c < clients; c++ {
				wg.Add(1)
				go func(c int) {
					defer wg.Done()
					for {
						i := n.Add(1)
						if i > int64(b.N) {
							return
						}
						s.mustRequest("coder", fmt.Sprintf(`{"op":"send","id":"b%d","session":"s%d","input":"%0180d"}`, i, c, i))
					}
				}(c)
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sends/s")
		})
	}
}

// BenchmarkSendLatency: p50 and p99 of one send with 10 and with 100,000
// existing sessions in the agent; the ratio should be near 1.
func BenchmarkSendLatency(b *testing.B) {
	for _, n := range []int{10, 100000} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			s := benchServer(b)
			s.mustRequest("coder", `{"op":"send","id":"warm","input":"x"}`)
			s.kill(s.cmd, unix.SIGTERM)
			makeSessions(b, filepath.Join(s.store, "home/0/agent/coder/session"), n)
			s.start()
			s.mustRequest("coder", `{"op":"send","id":"warm2","input":"x"}`) // loads the index
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				s.mustRequest("coder", fmt.Sprintf(`{"op":"send","id":"l%d","session":"x%d","input":"hi"}`, i, i%5))
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// makeSessions adds n session directories with an updated_at file each:
// what the index reads to order them. (The engine loads a session's logs
// only when it is used, so these stand for sessions that exist.)
func makeSessions(b *testing.B, container string, n int) {
	now := time.Now().Add(-time.Hour)
	for i := 0; i < n; i++ {
		d := filepath.Join(container, "old-"+strconv.Itoa(i))
		if err := os.MkdirAll(d, 0o700); err != nil {
			b.Fatal(err)
		}
		p := filepath.Join(d, "updated_at")
		os.WriteFile(p, []byte(strconv.FormatInt(now.Unix(), 10)+"\n"), 0o600)
		t := now.Add(time.Duration(i) * time.Millisecond)
		os.Chtimes(p, t, t)
	}
}
