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
