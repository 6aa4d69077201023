package integration

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// BenchmarkAppendCPU is BenchmarkAppend's fd row with each server's CPU
// time per append beside the rates: 200-byte lines through one O_APPEND
// descriptor to a session log and to a file of the go-fuse loopback in a
// process of its own, alternately. On a machine shared with other work
// the rates move with its load; the servers' CPU per append (from
// /proc/PID/stat) is steadier, and the difference of the two is what
// ctxfs adds to what any FUSE server pays (docs/benchmarks.md#appends-through-one-descriptor).
func BenchmarkAppendCPU(b *testing.B) {
	s := benchFuseServer(b)
	nativeDir := filepath.Join(filepath.Dir(s.store), "native")
	testkit.Must(b, os.MkdirAll(nativeDir, 0o700))
	line := jsonLines(200, 200)
	loop := spawnRef(b, nil, "loop", nativeDir)
	loopPid := 0 // the loopback is this process's other child
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	for _, t := range tasks {
		c, _ := os.ReadFile(t)
		for _, f := range strings.Fields(string(c)) {
			if p, _ := strconv.Atoi(f); p != s.cmd.Process.Pid {
				loopPid = p
			}
		}
	}
	benchNewSession(b, s, "a-x")
	paths := []string{benchMnt(s, "a-x", "messages.jsonl"), filepath.Join(loop, "x.jsonl")}
	b.Run("fd", func(b *testing.B) {
		sides := []*side{{name: "ctxfs"}, {name: "loop"}}
		var files []*os.File
		for _, p := range paths {
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
			testkit.Must(b, err)
			defer f.Close()
			files = append(files, f)
		}
		c0, l0 := processCPU(b, s.cmd.Process.Pid), processCPU(b, loopPid)
		b.ResetTimer()
		interleave(b, sides, func(j int) (int64, error) {
			n, err := files[j].Write(line)
			return int64(n), err
		})
		b.StopTimer()
		c1, l1 := processCPU(b, s.cmd.Process.Pid), processCPU(b, loopPid)
		reportOps(b, sides[0], sides[1])
		b.ReportMetric(float64((c1-c0).Microseconds())/float64(b.N), "ctxfs-CPU-µs/op")
		b.ReportMetric(float64((l1-l0).Microseconds())/float64(b.N), "loop-CPU-µs/op")
		reportJournal(b, s.store)
	})
}
