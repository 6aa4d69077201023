package runsfile

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/layout"
)

func newFile(t *testing.T) (*File, *storefs.Root, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, layout.StateDir), 0o700); err != nil {
		t.Fatal(err)
	}
	root, err := storefs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	f := &File{}
	if err := f.Create(root); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, root, filepath.Join(dir, Rel)
}

// Every line is in the file when its Start or End returns, whole, however
// many runs write at once (their lines share writes), and the next start
// finds the runs that never ended.
func TestLinesWrittenWhenTheyReturn(t *testing.T) {
	f, root, name := newFile(t)
	const runs = 400
	var wg sync.WaitGroup
	errs := make(chan string, 2*runs)
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run, rel := fmt.Sprintf("r%d", i), fmt.Sprintf("home/0/agent/a/session/s%d", i)
			f.Start(run, rel)
			if b, _ := os.ReadFile(name); !strings.Contains(string(b), "+"+run+" "+rel+"\n") {
				errs <- "+" + run
			}
			if i%2 == 0 {
				f.End(run)
				if b, _ := os.ReadFile(name); !strings.Contains(string(b), "\n-"+run+"\n") {
					errs <- "-" + run
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("line %s was not in the file when its call returned", e)
	}
	b, _ := os.ReadFile(name)
	if n := strings.Count(string(b), "\n"); n != runs+runs/2 {
		t.Fatalf("the file holds %d lines, want %d", n, runs+runs/2)
	}
	got := Interrupted(root)
	slices.Sort(got)
	var want []string
	for i := 1; i < runs; i += 2 {
		want = append(want, fmt.Sprintf("home/0/agent/a/session/s%d", i))
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("interrupted: %d sessions, want the %d whose runs never ended", len(got), len(want))
	}
}

// Nothing is written after Abandon returns, even by runs writing then.
func TestAbandonWritesNothingMore(t *testing.T) {
	f, _, name := newFile(t)
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() { defer wg.Done(); f.Start(fmt.Sprintf("r%d", i), "s") }()
	}
	f.Abandon()
	before, _ := os.ReadFile(name)
	wg.Wait()
	f.End("late")
	if after, _ := os.ReadFile(name); string(after) != string(before) {
		t.Fatalf("written after Abandon: %q", strings.TrimPrefix(string(after), string(before)))
	}
}

// The file holds the runs still open, not every run the server ever
// started: 20,000 runs started and ended by 8 writers at once, a few left
// open and a dormant one kept, leave it under twice compactFloor (it grew
// by their 1.3 MB of lines), and the next start finds exactly the open
// ones.
func TestFileHoldsOpenRuns(t *testing.T) {
	f, root, name := newFile(t)
	f.Keep("dormant", "home/0/agent/a/session/waiting")
	const writers, each = 8, 2500
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				run := fmt.Sprintf("run-%d-%d", w, i)
				f.Start(run, "home/1001/agent/coder/session/"+strings.Repeat("s", 30))
				if i != each-1 {
					f.End(run)
				}
			}
		}()
	}
	wg.Wait()
	st, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	const most = 128 << 10 // twice the size under which it is never rewritten
	if st.Size() > most {
		t.Errorf("after %d runs, %d open, the runs file holds %d bytes, want at most %d", writers*each, writers+1, st.Size(), most)
	}
	got := Interrupted(root)
	slices.Sort(got)
	want := []string{"home/0/agent/a/session/waiting", "home/1001/agent/coder/session/" + strings.Repeat("s", 30)}
	if !slices.Equal(got, want) {
		t.Fatalf("interrupted: %q, want %q", got, want)
	}
	if b, _ := os.ReadFile(name); strings.Count(string(b), "\n+run-") < writers {
		t.Fatalf("the runs file lost an open run:\n%s", b)
	}
}
