package testkit

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/abi"
)

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) Fatalf(string, ...any) { r.failed = true }
func (r *recorder) Fatal(...any)          { r.failed = true }

// WantErrno passes for the errno however it is carried, and fails for
// another errno, no error, or a refusal that does not say the words.
func TestWantErrno(t *testing.T) {
	pathErr := &os.PathError{Op: "open", Path: "x", Err: syscall.EACCES}
	for what, c := range map[string]struct {
		err   error
		words []string
		fails bool
	}{
		"a bare errno":           {syscall.EACCES, nil, false},
		"an *abi.Error":          {abi.Errorf(syscall.EACCES, "op", "not yours"), []string{"not yours"}, false},
		"an *os.PathError":       {pathErr, nil, false},
		"wrapped":                {fmt.Errorf("ctx: %w", pathErr), nil, false},
		"another errno":          {syscall.EPERM, nil, true},
		"no error":               {nil, nil, true},
		"the words not said":     {abi.Errorf(syscall.EACCES, "op", "refused"), []string{"not yours"}, true},
		"an error with no errno": {fmt.Errorf("EACCES"), nil, true},
	} {
		r := &recorder{TB: t}
		WantErrno(r, what, c.err, syscall.EACCES, c.words...)
		if r.failed != c.fails {
			t.Errorf("%s: failed %v, want %v", what, r.failed, c.fails)
		}
	}
}

// Same sees a changed byte, a new file, a removed file and a moved
// symlink, each alone, and nothing when nothing changed.
func TestSnapshotSame(t *testing.T) {
	for what, change := range map[string]func(dir string){
		"nothing":   func(string) {},
		"a byte":    func(dir string) { Must(t, os.WriteFile(filepath.Join(dir, "f"), []byte("b"), 0o600)) },
		"a file":    func(dir string) { Must(t, os.WriteFile(filepath.Join(dir, "g"), nil, 0o600)) },
		"a removal": func(dir string) { Must(t, os.Remove(filepath.Join(dir, "f"))) },
		"a symlink": func(dir string) {
			Must(t, os.Remove(filepath.Join(dir, "l")))
			Must(t, os.Symlink("g", filepath.Join(dir, "l")))
		},
	} {
		dir := t.TempDir()
		Must(t, os.WriteFile(filepath.Join(dir, "f"), []byte("a"), 0o600))
		Must(t, os.Symlink("f", filepath.Join(dir, "l")))
		before := Snapshot(t, dir, nil)
		change(dir)
		r := &recorder{TB: t}
		Same(r, what, before, Snapshot(t, dir, nil))
		if r.failed != (what != "nothing") {
			t.Errorf("%s: Same failed %v", what, r.failed)
		}
	}
}

// Beside calls again in its goroutines while work runs and returns only
// when they have all ended; a goroutine whose again says false stops.
func TestBeside(t *testing.T) {
	var calls atomic.Int64
	enough := make(chan struct{})
	Beside(4, func() { <-enough }, func() bool {
		if calls.Add(1) == 100 {
			close(enough) // work returns once the goroutines have run
		}
		return true
	})
	n := calls.Load()
	time.Sleep(20 * time.Millisecond)
	if now := calls.Load(); n < 100 || now != n {
		t.Errorf("%d calls when Beside returned, %d after: want 100 or more, and none after", n, now)
	}

	calls.Store(0)
	Beside(1, func() { time.Sleep(20 * time.Millisecond) }, func() bool {
		calls.Add(1)
		return false
	})
	if n := calls.Load(); n != 1 {
		t.Errorf("again that says false was called %d times, want once", n)
	}
}
