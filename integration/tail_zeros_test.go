package integration

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestTailNoZeros: `tail -f` of a log that grows by sends and by appends
// through the mount, while other readers stat it and read it whole (so
// the kernel holds its last page, read up to an older end, and learns new
// sizes from their GETATTRs), prints exactly the log: never the zeros
// the kernel filled that page with past the end it was read to
// (fs/pages.go). Before the fix it printed NULs within seconds; CI's
// TestExactReadsProperty caught it once in 20 minutes.
func TestTailNoZeros(t *testing.T) {
	s := newFuseServer(t)
	s.send("zeros", "c0", "first")
	rel := sessRel("zeros") + "/messages.jsonl"
	mnt, store := s.mnt(rel), filepath.Join(s.store, rel)
	tail := startTail(t, mnt)
	var stop atomic.Bool
	var wg sync.WaitGroup
	t.Cleanup(func() { stop.Store(true); wg.Wait() })
	for range 2 {
		repeatUntil(&stop, &wg, func() { os.Stat(mnt) })
		repeatUntil(&stop, &wg, func() { os.ReadFile(mnt) })
	}
	appended := make(chan error, 1)
	wg.Add(1)
	go func() { // appends through the mount, beside the sends
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			line := fmt.Sprintf(`{"role":"user","content":"appended %d %s"}`+"\n", i, strings.Repeat("a", i%3000))
			if err := appendMnt(mnt, line); err != nil {
				appended <- err
				return
			}
		}
	}()
	deadline := time.Now().Add(15 * time.Second)
	for i := 1; time.Now().Before(deadline); i++ {
		s.send("zeros", fmt.Sprintf("c%d", i), "sent "+strings.Repeat("s", i%3000))
		if i%20 == 0 {
			tailIsPrefix(t, tail, store, fmt.Sprintf("after %d sends", i))
		}
		select {
		case err := <-appended:
			t.Fatalf("append through the mount: %v", err)
		default:
		}
	}
	stop.Store(true)
	wg.Wait()
	tail.followsAll(t, mnt, store)
}

// tailIsPrefix fails when what tail printed is not the start of the
// store's log, saying where and what it printed there.
func tailIsPrefix(t *testing.T, tail *follower, store, what string) {
	t.Helper()
	printed, log := tail.printed(), fileBytes(t, store)
	if strings.HasPrefix(log, printed) {
		return
	}
	at := firstDiff(printed, log)
	t.Fatalf("%s: tail -f printed %d bytes, not the start of the log (%d bytes): from byte %d it printed %q where the log holds %q",
		what, len(printed), len(log), at, printed[at:min(at+48, len(printed))], log[at:min(at+48, len(log))])
}

// repeatUntil runs f again and again in a goroutine of wg's until stop.
func repeatUntil(stop *atomic.Bool, wg *sync.WaitGroup, f func()) {
	wg.Go(func() {
		for !stop.Load() {
			f()
		}
	})
}

// firstDiff is the offset of the first byte where a and b differ (the
// shorter one's length when one is the start of the other).
func firstDiff(a, b string) int {
	at := 0
	for at < min(len(a), len(b)) && a[at] == b[at] {
		at++
	}
	return at
}

// TestValueReadsWhole: readers that stat and read a value while it is
// replaced again and again by values of other lengths read one whole
// value each time (SPEC 5: readers never see a half-written value):
// never an old value cut or padded with zeros to a new size, nor an old
// head with a new tail (fs/value.go, openCopy). Before, the first torn
// read came within a second.
func TestValueReadsWhole(t *testing.T) {
	s := newFuseServer(t)
	s.send("whole", "c0", "first")
	p := s.mnt(sessRel("whole") + "/cwd")
	values := []string{"/a\n", "/" + strings.Repeat("b", 40) + "\n", "/c\n", "/" + strings.Repeat("d", 20) + "\n"}
	whole := map[string]bool{}
	for _, v := range values {
		whole[v] = true
		if err := os.WriteFile(p, []byte(v), 0); err != nil {
			t.Fatal(err)
		}
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var mu sync.Mutex
	torn := map[string]int{}
	t.Cleanup(func() { stop.Store(true); wg.Wait() })
	for range 2 {
		repeatUntil(&stop, &wg, func() { os.Stat(p) })
		repeatUntil(&stop, &wg, func() {
			if b, err := os.ReadFile(p); err == nil && !whole[string(b)] {
				mu.Lock()
				torn[string(b)]++
				mu.Unlock()
			}
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		if err := os.WriteFile(p, []byte(values[i%len(values)]), 0); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		n := len(torn)
		mu.Unlock()
		if n > 0 {
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	for b, n := range torn {
		t.Errorf("a reader read %q (%d times)", b, n)
	}
}

// TestLargeValueReadsWhole: a value over a page (meta.json with a long
// rule) read a little at a time is one value, the one there at the
// open, though it is replaced by a value of another length between the
// reads (fs/value.go, openCopy: every reader's open takes a copy).
func TestLargeValueReadsWhole(t *testing.T) {
	s := newFuseServer(t)
	s.send("large", "l0", "hello")
	p := s.mnt(sessRel("large") + "/meta.json")
	meta := func(rule string) string {
		return `{"client":"ctx","scope":"private","rule":"` + rule + `"}` + "\n"
	}
	page := os.Getpagesize()
	first, second := meta(strings.Repeat("x", 3*page)), meta(strings.Repeat("y", 2*page+100))
	testkit.Must(t, os.WriteFile(p, []byte(first), 0))
	f, err := os.Open(p)
	testkit.Must(t, err)
	defer f.Close()
	buf := make([]byte, 1000)
	n, err := f.Read(buf)
	testkit.Must(t, err)
	got := append([]byte(nil), buf[:n]...)
	testkit.Must(t, os.WriteFile(p, []byte(second), 0)) // replaced meanwhile
	rest, err := io.ReadAll(f)
	testkit.Must(t, err)
	if got = append(got, rest...); string(got) != first {
		t.Fatalf("read %d bytes across a replacement, not the value of the open (%d bytes)", len(got), len(first))
	}
	if now, _ := os.ReadFile(p); string(now) != second {
		t.Fatalf("a new open reads %d bytes, not the second value (%d)", len(now), len(second))
	}
}
