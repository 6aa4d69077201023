package logx

import (
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// BenchmarkQueueSparseLines logs a run's line (as the server's "run
// start") through a Queue to a file, one line every pause, as a server
// logs between sends, and reports the process's CPU a line (the caller's
// formatting, the writer's wakeup and its write). The pause spins (a
// sleep's own wakeup would cost more than the line), and its time is
// taken off the CPU.
func BenchmarkQueueSparseLines(b *testing.B) {
	for _, pause := range []time.Duration{0, 200 * time.Microsecond} {
		b.Run("pause="+pause.String(), func(b *testing.B) { benchLines(b, pause, false) })
	}
	b.Run("pause=0s/line", func(b *testing.B) { benchLines(b, 0, true) })
}

// benchLines logs b.N lines a pause apart, with the logger's Info or
// with Line (line: without the caller's program counter).
func benchLines(b *testing.B, pause time.Duration, line bool) {
	f, err := os.Create(filepath.Join(b.TempDir(), "log"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	q := NonBlocking(f)
	log := slog.New(slog.NewTextHandler(q, nil))
	args := []any{"run", "ctx-0123456789abcdef0123456789abcdef", "agent", "coder", "session", "s1", "scope", "private", "uid", 1001}
	var spun time.Duration
	before := cpuTime(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if line {
			Line(log, slog.LevelInfo, "run start", args...)
		} else {
			log.Info("run start", args...)
		}
		if pause > 0 {
			start := time.Now()
			for time.Since(start) < pause {
			}
			spun += time.Since(start)
		}
	}
	q.Close()
	b.StopTimer()
	b.ReportMetric(float64((cpuTime(b)-before-spun).Microseconds())/float64(b.N), "CPU-µs/line")
}

// cpuTime is the process's user and system time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
