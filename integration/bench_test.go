package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// benchServer is newServer for benchmarks.
func benchServer(b *testing.B) *server { return newServer(b) }

// syncRate measures the machine's durable-append limit on the disk that
// holds dir: 200-byte appends to one file, each followed by fdatasync, for
// about d. It returns syncs per second.
func syncRate(b *testing.B, dir string, d time.Duration) float64 {
	n, el := syncLoop(b, dir, d)
	return float64(n) / el.Seconds()
}

// syncLoop runs syncRate's loop for d and returns its appends and the
// time they took.
func syncLoop(b *testing.B, dir string, d time.Duration) (int, time.Duration) {
	f, err := os.CreateTemp(dir, "raw-*.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	line := make([]byte, 200)
	line[199] = '\n'
	n, t0 := 0, time.Now()
	for time.Since(t0) < d {
		if _, err := f.Write(line); err != nil {
			b.Fatal(err)
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			b.Fatal(err)
		}
		n++
	}
	return n, time.Since(t0)
}

// reportJournal reports store-journal: 1 when the filesystem that holds
// dir keeps a journal (ext4's jbd2, listed in /proc/fs/jbd2), else 0. A
// durable append's reference cost depends on it: with a journal, an
// append+fdatasync also commits the filesystem's journal, which an
// overwrite in place (what ctxfs's own journal does) does not; without
// one, both write the data and the inode. scripts/bench-journaled.sh runs
// the benchmarks on a journaled ext4.
func reportJournal(b *testing.B, dir string) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		b.Fatal(err)
	}
	dev, err := os.Readlink(fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)))
	journal := 0.0
	if err == nil {
		if m, _ := filepath.Glob("/proc/fs/jbd2/" + filepath.Base(dev) + "-*"); len(m) > 0 {
			journal = 1
		}
	}
	b.ReportMetric(journal, "store-journal")
}

// BenchmarkDurableSends: sends per second with debug/echo, from 1 and from
// 16 concurrent clients (each its own session), beside the machine's own
// limit measured in the same run on the same disk (the store's): a loop
// of 200-byte appends each followed by fdatasync, run for 0.5 s just
// before and just after the sends (the mean is reported). Every send
// records several lines durably, so sends/syncs below 1 is expected for
// one client; with 16, group commit should lift it. server-CPU-µs/send is
// the server process's CPU time (every thread, user and system) over the
// sends, per send.
//
// The sends start once the agent's definition is over two seconds old:
// a definition changed more recently than that is read again at every
// send (agent/def/cache.go, racyWindow), which the server just made here
// would otherwise pay through most of the one-client run, and a server
// in use does not.
func BenchmarkDurableSends(b *testing.B) {
	s := benchServer(b)
	time.Sleep(2100 * time.Millisecond)
	for _, clients := range []int{1, 16} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			b.StopTimer()
			before := syncRate(b, s.store, 500*time.Millisecond)
			var n atomic.Int64
			var wg sync.WaitGroup
			run := strconv.FormatInt(time.Now().UnixNano(), 36) // client ids are never reused across b.N rounds
			cpu0 := processCPU(b, s.cmd.Process.Pid)
			own0 := processCPU(b, os.Getpid())
			idle0, all0 := machineCPU(b)
			b.StartTimer()
			t0 := time.Now()
			for c := 0; c < clients; c++ {
				wg.Add(1)
				go func(c int) {
					defer wg.Done()
					for {
						i := n.Add(1)
						if i > int64(b.N) {
							return
						}
						fr := s.mustRequest("coder", fmt.Sprintf(`{"op":"send","id":"b%s-%d","session":"s%d-%d","input":"%0180d"}`, run, i, clients, c, i))
						if len(fr) == 0 || fr[len(fr)-1]["type"] != "done" {
							b.Errorf("send: %v", fr)
							return
						}
					}
				}(c)
			}
			wg.Wait()
			el := time.Since(t0)
			b.StopTimer()
			cpu := processCPU(b, s.cmd.Process.Pid) - cpu0
			own := processCPU(b, os.Getpid()) - own0
			idle1, all1 := machineCPU(b)
			after := syncRate(b, s.store, 500*time.Millisecond)
			limit := (before + after) / 2
			sends := float64(b.N) / el.Seconds()
			b.ReportMetric(sends, "sends/s")
			b.ReportMetric(limit, "syncs/s")
			b.ReportMetric(sends/limit, "sends/syncs")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "server-CPU-µs/send")
			b.ReportMetric(float64(own.Microseconds())/float64(b.N), "client-CPU-µs/send")
			b.ReportMetric(1-float64(idle1-idle0)/float64(all1-all0), "machine-busy")
			reportJournal(b, s.store)
		})
	}
}

// processCPU is the user and system CPU time pid has used so far (all its
// threads), from /proc/PID/stat: the server's CPU per send is steadier
// than sends/s on a shared machine, where the disk's sync rate moves.
func processCPU(b testing.TB, pid int) time.Duration {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command name, which is in parentheses and may
	// hold spaces: state is the first, utime the 12th, stime the 13th.
	f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// machineCPU is the machine's idle time (idle and iowait) and all its
// time so far, in clock ticks summed over every core, from /proc/stat's
// first line: their differences over the sends say whether the cores were
// busy (a row bound by CPU) or waited (bound by a lock, the disk or a
// hand-off).
func machineCPU(b testing.TB) (idle, all int64) {
	st, err := os.ReadFile("/proc/stat")
	if err != nil {
		b.Fatal(err)
	}
	line, _, _ := bytes.Cut(st, []byte("\n"))
	for i, f := range strings.Fields(string(line))[1:] {
		n, _ := strconv.ParseInt(f, 10, 64)
		if i < 8 { // user nice system idle iowait irq softirq steal; guest time is in user already
			all += n
		}
		if i == 3 || i == 4 {
			idle += n
		}
	}
	return idle, all
}

// clockTicks is the kernel's USER_HZ, the unit of /proc's CPU times (100
// on Linux for every architecture Go supports).
const clockTicks = 100

// BenchmarkSendLatency: latency of one send (connect, request, every frame
// to EOF) to an agent holding 10 sessions and to one holding 100,000, two
// servers running side by side; each iteration sends once to each. The
// sends go to 5 sessions made for the purpose, so the old sessions only
// weigh through the index. Reports p50 and p99 of each and the ratios
// (100,000 over 10; near 1 is the goal).
func BenchmarkSendLatency(b *testing.B) {
	counts := []int{10, 100000}
	servers := make([]*server, len(counts))
	for k, n := range counts {
		s := benchServer(b)
		s.mustRequest("coder", `{"op":"send","id":"warm","input":"x"}`)
		s.kill(s.cmd, unix.SIGTERM)
		t0 := time.Now()
		makeSessions(b, filepath.Join(s.store, "home/0/agent/coder/session"), n-1)
		b.Logf("made %d sessions in %v", n-1, time.Since(t0).Round(time.Millisecond))
		s.start()
		s.mustRequest("coder", `{"op":"send","id":"warm2","input":"x"}`) // loads the index
		servers[k] = s
	}
	b.Run("sessions=10-vs-100000", func(b *testing.B) {
		run := strconv.FormatInt(time.Now().UnixNano(), 36)
		lat := make([][]time.Duration, len(servers))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			for k, s := range servers {
				t0 := time.Now()
				fr := s.mustRequest("coder", fmt.Sprintf(`{"op":"send","id":"l%s-%d","session":"x%d","input":"hi"}`, run, i, i%5))
				lat[k] = append(lat[k], time.Since(t0))
				if len(fr) == 0 || fr[len(fr)-1]["type"] != "done" {
					b.Fatalf("send: %v", fr)
				}
			}
		}
		b.StopTimer()
		var p50, p99 [2]float64
		for k := range lat {
			sort.Slice(lat[k], func(i, j int) bool { return lat[k][i] < lat[k][j] })
			p50[k] = float64(lat[k][len(lat[k])/2].Microseconds())
			p99[k] = float64(lat[k][len(lat[k])*99/100].Microseconds())
		}
		b.ReportMetric(p50[0], "p50-µs-10")
		b.ReportMetric(p99[0], "p99-µs-10")
		b.ReportMetric(p50[1], "p50-µs-100k")
		b.ReportMetric(p99[1], "p99-µs-100k")
		b.ReportMetric(p50[1]/p50[0], "p50-100k/10")
		b.ReportMetric(p99[1]/p99[0], "p99-100k/10")
	})
}

// makeSessions adds n session directories old-0 … old-(n-1) with an
// updated_at file each, with distinct mtimes: what the index reads to
// order them at load. (The engine loads a session's logs only when it is
// used, and these are never used, so they stand for sessions that exist;
// full copies of 100,000 real sessions take minutes on a busy disk.
// BenchmarkLsSessions uses full copies.)
func makeSessions(b *testing.B, container string, n int) {
	now := time.Now().Add(-time.Hour)
	workers := 2 * runtime.NumCPU()
	var wg sync.WaitGroup
	var failed atomic.Value
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += workers {
				d := filepath.Join(container, "old-"+strconv.Itoa(i))
				p := filepath.Join(d, "updated_at")
				t := now.Add(time.Duration(i) * time.Millisecond)
				err := os.MkdirAll(d, 0o700)
				if err == nil {
					err = os.WriteFile(p, []byte(strconv.FormatInt(t.Unix(), 10)+"\n"), 0o600)
				}
				if err == nil {
					err = os.Chtimes(p, t, t)
				}
				if err != nil {
					failed.Store(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		b.Fatal(err)
	}
}
