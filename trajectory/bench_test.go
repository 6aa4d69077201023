package trajectory

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// writeSession writes a session of about n log lines (both logs together)
// as a jsonl agent records it: per run, 3 message lines (user, tool,
// assistant) and 8 events (start, state, tool_call, tool_result, message,
// usage, done, state).
func writeSession(t testing.TB, dir string, n int) (messages, events string) {
	t.Helper()
	messages, events = filepath.Join(dir, "messages.jsonl"), filepath.Join(dir, "events.jsonl")
	mf, err := os.Create(messages)
	if err != nil {
		t.Fatal(err)
	}
	ef, err := os.Create(events)
	if err != nil {
		t.Fatal(err)
	}
	mw, ew := bufio.NewWriter(mf), bufio.NewWriter(ef)
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	text := strings.Repeat("lorem ipsum dolor sit amet ", 10)
	for r := 0; r*11 < n; r++ {
		run := fmt.Sprintf("run-%06d", r)
		ts := func(k int) string {
			return base.Add(time.Duration(r*10+k) * time.Millisecond).Format("2006-01-02T15:04:05.000Z07:00")
		}
		fmt.Fprintf(mw, `{"role":"user","run":%q,"content":"question %d: %s","ts":%q}`+"\n", run, r, text[:100], ts(0))
		fmt.Fprintf(ew, `{"type":"start","id":%q,"run":%q,"client_id":"c","session":"s","scope":"private","cwd":"/","ts":%q}`+"\n", run, run, ts(0))
		fmt.Fprintf(ew, `{"type":"state","state":"active","run":%q,"ts":%q}`+"\n", run, ts(0))
		fmt.Fprintf(ew, `{"type":"tool_call","id":"c1","name":"sh","arguments":{"command":"ls -l /tmp/%d"},"run":%q,"ts":%q}`+"\n", r, run, ts(1))
		result := fmt.Sprintf(`"tool_call_id":"c1","content":"%s","is_error":false`, text+text)
		fmt.Fprintf(ew, `{"type":"tool_result",%s,"run":%q,"ts":%q}`+"\n", result, run, ts(2))
		fmt.Fprintf(mw, `{"role":"tool","run":%q,"name":"sh","content":[{"type":"tool_result",%s}],"ts":%q}`+"\n", run, result, ts(2))
		content := fmt.Sprintf(`[{"type":"text","text":"answer %d: %s"}]`, r, text)
		fmt.Fprintf(ew, `{"type":"message","role":"assistant","content":%s,"run":%q,"ts":%q}`+"\n", content, run, ts(3))
		fmt.Fprintf(mw, `{"role":"assistant","run":%q,"content":%s,"ts":%q}`+"\n", run, content, ts(3))
		fmt.Fprintf(ew, `{"type":"usage","model":"m/x","input_tokens":%d,"output_tokens":7,"run":%q,"ts":%q}`+"\n", 100+r, run, ts(4))
		fmt.Fprintf(ew, `{"type":"done","run":%q,"status":"ok","ts":%q}`+"\n", run, ts(5))
		fmt.Fprintf(ew, `{"type":"state","state":"done","run":%q,"ts":%q}`+"\n", run, ts(5))
	}
	for _, err := range []error{mw.Flush(), ew.Flush(), mf.Close(), ef.Close()} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return messages, events
}

// exportFiles exports the two files to io.Discard, as ctx reads them.
func exportFiles(messages, events string) error { return exportTo(io.Discard, messages, events) }

// exportTo exports the two files to w.
func exportTo(w io.Writer, messages, events string) error {
	m, err := os.Open(messages)
	if err != nil {
		return err
	}
	defer m.Close()
	e, err := os.Open(events)
	if err != nil {
		return err
	}
	defer e.Close()
	return Export(w, m, e, testInfo)
}

// copyFiles is the yardstick: a plain io.Copy of both files.
func copyFiles(messages, events string) error {
	for _, p := range []string{messages, events} {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// cpuTime is the CPU time the process has used, user and system, every
// thread: steadier than the wall clock on a shared machine.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measure runs f and returns how long it took and the peak of the heap's
// object bytes above what was there before (sampled every millisecond through
// runtime/metrics, which does not stop the world).
func measure(f func() error) (time.Duration, uint64, error) {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	before := read()
	var peak uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			peak = max(peak, read())
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	start := time.Now()
	err := f()
	d := time.Since(start)
	close(stop)
	wg.Wait()
	peak = max(peak, read())
	if peak < before {
		return d, 0, err
	}
	return d, peak - before, err
}

// BenchmarkTrajectory100k exports a session of 100,000 log lines and, in
// the same iterations, copies the same files with io.Copy: time and peak
// heap side by side, and their ratios.
func BenchmarkTrajectory100k(b *testing.B) {
	messages, events := writeSession(b, b.TempDir(), 100_000)
	var size int64
	for _, p := range []string{messages, events} {
		st, _ := os.Stat(p)
		size += st.Size()
	}
	var exportT, copyT, exportCPU time.Duration
	var exportPeak, copyPeak uint64
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cpu0 := cpuTime()
		d, p, err := measure(func() error { return exportFiles(messages, events) })
		if err != nil {
			b.Fatal(err)
		}
		exportCPU += cpuTime() - cpu0
		exportT, exportPeak = exportT+d, max(exportPeak, p)
		d, p, err = measure(func() error { return copyFiles(messages, events) })
		if err != nil {
			b.Fatal(err)
		}
		copyT, copyPeak = copyT+d, max(copyPeak, p)
	}
	n := float64(b.N)
	b.ReportMetric(exportT.Seconds()*1000/n, "export-ms/op")
	b.ReportMetric(exportCPU.Seconds()*1000/n, "export-cpu-ms/op")
	b.ReportMetric(copyT.Seconds()*1000/n, "copy-ms/op")
	b.ReportMetric(exportT.Seconds()/copyT.Seconds(), "time-ratio")
	b.ReportMetric(float64(exportPeak)/1024, "export-peak-heap-KiB")
	b.ReportMetric(float64(copyPeak)/1024, "copy-peak-heap-KiB")
	b.ReportMetric(float64(size)/(1<<20), "input-MiB")
}

// TestBoundedMemory: exporting a session many times larger than the heap
// it may use keeps the heap bounded: the logs are streamed, never loaded.
func TestBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	messages, events := writeSession(t, t.TempDir(), 100_000)
	var size int64
	for _, p := range []string{messages, events} {
		st, _ := os.Stat(p)
		size += st.Size()
	}
	_, peak, err := measure(func() error { return exportFiles(messages, events) })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("input %.1f MiB, peak heap %.1f MiB", float64(size)/(1<<20), float64(peak)/(1<<20))
	// Garbage counts until a collection frees it; the bound leaves room
	// for the collector's pacing, and is still a fraction of the input.
	if limit := uint64(16 << 20); peak > limit || int64(peak) > size/2 {
		t.Errorf("peak heap %d bytes for %d bytes of logs: not streaming", peak, size)
	}
}
