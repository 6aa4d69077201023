package behind

import (
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/storefs"
)

// fakeStore is a store of files in memory: what was written (and how
// often), an error each rel's next writes fail with, and what the queue
// announced.
type fakeStore struct {
	mu      sync.Mutex
	files   map[string]string
	writes  map[string]int
	fail    map[string]error
	changed []string
	written []string
	held    sync.Mutex // Hold: one session at a time, as a cache key would
}

func newFakeStore() *fakeStore {
	return &fakeStore{files: map[string]string{}, writes: map[string]int{}, fail: map[string]error{}}
}

func (f *fakeStore) Write(rel string, data []byte, _ storefs.Owner, _ *unix.Timespec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes[rel]++
	if err := f.fail[rel]; err != nil {
		return err
	}
	f.files[rel] = string(data)
	return nil
}

func (f *fakeStore) Hold(_ string, fn func()) {
	f.held.Lock()
	defer f.held.Unlock()
	fn()
}

func (f *fakeStore) Changed(rels ...string) {
	f.mu.Lock()
	f.changed = append(f.changed, rels...)
	f.mu.Unlock()
}

func (f *fakeStore) Written(rel string) {
	f.mu.Lock()
	f.written = append(f.written, rel)
	f.mu.Unlock()
}

// failWith makes rel's writes fail with errno (0: succeed).
func (f *fakeStore) failWith(rel string, errno unix.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno == 0 {
		delete(f.fail, rel)
		return
	}
	f.fail[rel] = &os.PathError{Op: "write", Path: rel, Err: errno}
}

// file is rel's content in the store, and how many writes it took.
func (f *fakeStore) file(rel string) (string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.files[rel], f.writes[rel]
}

func (f *fakeStore) announced(rel string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.changed, rel)
}

func newQueue(t *testing.T) (*Queue, *fakeStore) {
	t.Helper()
	st := newFakeStore()
	q := New(st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() {
		if err := q.Check(); err != nil {
			t.Error(err)
		}
	})
	return q, st
}

func put(q *Queue, dir, name, data string, failed error) {
	q.Put(dir, name, storefs.Owner{Uid: -1, Gid: -1, FileMode: 0o600}, Value{Data: []byte(data)}, failed)
}

// wantServed checks what the queue serves for rel ("" and false: none).
func wantServed(t *testing.T, q *Queue, rel, want string, served bool) {
	t.Helper()
	v, ok := q.Value(rel)
	if ok != served || string(v.Data) != want {
		t.Errorf("%s: served %v %q, want %v %q", rel, ok, v.Data, served, want)
	}
}

// A value put is served at once, before anything is written; a flush
// writes it, and then the store's file is served.
func TestServedBeforeWritten(t *testing.T) {
	q, st := newQueue(t)
	put(q, "s1", "state", "done\n", nil)
	wantServed(t, q, "s1/state", "done\n", true)
	if got, n := st.file("s1/state"); n != 0 {
		t.Fatalf("written before a flush: %q", got)
	}
	q.Flush("", false)
	if got, n := st.file("s1/state"); got != "done\n" || n != 1 {
		t.Errorf("store holds %q after %d writes", got, n)
	}
	wantServed(t, q, "s1/state", "", false)
	if q.Waits("s1") || !slices.Equal(st.written, []string{"s1/state"}) {
		t.Errorf("still waits %v; written %v", q.Waits("s1"), st.written)
	}
}

// A value changed twice before a flush is written once, the last.
func TestChangedTwiceWrittenOnce(t *testing.T) {
	q, st := newQueue(t)
	put(q, "s1", "state", "active\n", nil)
	put(q, "s1", "state", "done\n", nil)
	if c := q.Counts(""); c.Waiting != 1 {
		t.Fatalf("%d values wait, want 1", c.Waiting)
	}
	q.Flush("s1", false)
	if got, n := st.file("s1/state"); got != "done\n" || n != 1 {
		t.Errorf("store holds %q after %d writes, want done after 1", got, n)
	}
}

// A value whose write failed for want of room is still served and
// waits; a flush without failed leaves it, one with failed tries it
// again, and once there is room it lands.
func TestFailedForRoomServedAndRetried(t *testing.T) {
	for _, errno := range []unix.Errno{unix.ENOSPC, unix.EDQUOT, unix.EMFILE, unix.ENFILE, unix.ENOMEM} {
		q, st := newQueue(t)
		st.failWith("s1/latest.md", errno)
		put(q, "s1", "latest.md", "hello\n", nil)
		q.Flush("", true)
		wantServed(t, q, "s1/latest.md", "hello\n", true)
		if !q.Waits("s1") || st.announced("s1/latest.md") {
			t.Errorf("%v: waits %v, announced %v", errno, q.Waits("s1"), st.changed)
		}
		q.Flush("", false)
		if _, n := st.file("s1/latest.md"); n != 1 {
			t.Errorf("%v: a flush without failed tried a failed value (%d writes)", errno, n)
		}
		st.failWith("s1/latest.md", 0)
		q.Flush("", true)
		if got, n := st.file("s1/latest.md"); got != "hello\n" || n != 2 || q.Waits("s1") {
			t.Errorf("%v: store holds %q after %d writes; waits %v", errno, got, n, q.Waits("s1"))
		}
	}
}

// A value whose write failed otherwise (something planted, an I/O error)
// is hidden, the store's file served as it is (announced once), and is
// still written again until it holds.
func TestFailedOtherwiseHiddenAndRetried(t *testing.T) {
	for _, errno := range []unix.Errno{unix.EIO, unix.ELOOP, unix.EISDIR} {
		q, st := newQueue(t)
		st.failWith("s1/state", errno)
		put(q, "s1", "state", "done\n", nil)
		q.Flush("", true)
		wantServed(t, q, "s1/state", "", false)
		if !q.Waits("s1") || !st.announced("s1/state") {
			t.Errorf("%v: waits %v, announced %v", errno, q.Waits("s1"), st.changed)
		}
		st.failWith("s1/state", 0)
		q.Flush("", true)
		if got, _ := st.file("s1/state"); got != "done\n" || q.Waits("s1") {
			t.Errorf("%v: store holds %q; waits %v", errno, got, q.Waits("s1"))
		}
	}
	// Put with the error of a write that failed just now: the same.
	q, _ := newQueue(t)
	put(q, "s1", "state", "done\n", &os.PathError{Op: "write", Path: "x", Err: unix.EIO})
	wantServed(t, q, "s1/state", "", false)
	put(q, "s1", "state", "done\n", &os.PathError{Op: "write", Path: "x", Err: unix.ENOSPC})
	wantServed(t, q, "s1/state", "done\n", true)
}

// A session directory that is gone takes no value: it is forgotten, not
// written again.
func TestGoneDirectoryForgotten(t *testing.T) {
	q, st := newQueue(t)
	st.failWith("s1/state", unix.ENOENT)
	put(q, "s1", "state", "done\n", nil)
	q.Flush("", true)
	if q.Waits("s1") || !st.announced("s1/state") {
		t.Errorf("waits %v, announced %v", q.Waits("s1"), st.changed)
	}
}

// Dropped and forgotten values are neither served nor written.
func TestDropAndForget(t *testing.T) {
	q, st := newQueue(t)
	put(q, "s1", "state", "done\n", nil)
	put(q, "s1", "cwd", "/x\n", nil)
	put(q, "s2", "state", "done\n", nil)
	q.Drop("s2/state")
	q.Forget("s1")
	q.Flush("", true)
	if c := q.Counts(""); c.Waiting != 0 || len(st.writes) != 0 {
		t.Errorf("%d values wait, %d writes", c.Waiting, len(st.writes))
	}
	if !st.announced("s1/state") || !st.announced("s1/cwd") {
		t.Errorf("forgotten values not announced: %v", st.changed)
	}
}

// putLoose leaves a failed value of the session directory dir loose, as
// a session that left the cache with it does.
func putLoose(q *Queue, dir, data string) {
	put(q, dir, "latest.md", data, &os.PathError{Op: "write", Path: dir, Err: unix.ENOSPC})
	q.Release(dir)
}

// The loose values are bounded by count and by bytes: beyond, the oldest
// is forgotten (and announced: the store's file is served again). A
// session loading again takes its values back (Attach): never loose,
// never forgotten while it is loaded.
func TestLooseBoundDropsTheOldest(t *testing.T) {
	q, st := newQueue(t)
	q.SetBound(2, 1<<20)
	putLoose(q, "s1", "one\n")
	putLoose(q, "s2", "two\n")
	q.Attach("s1") // s1 loads again
	putLoose(q, "s3", "three\n")
	putLoose(q, "s4", "four\n")
	wantServed(t, q, "s1/latest.md", "one\n", true) // loaded: kept
	wantServed(t, q, "s2/latest.md", "", false)     // the oldest loose: forgotten
	if c := q.Counts(""); c.Waiting != 3 || c.Loose != 2 || c.LooseBytes != len("three\nfour\n") || !st.announced("s2/latest.md") {
		t.Errorf("counts %+v, announced %v", c, st.changed)
	}

	q.SetBound(10, len("four\nfive\n"))
	putLoose(q, "s5", "five\n")
	wantServed(t, q, "s3/latest.md", "", false)
	if c := q.Counts(""); c.Loose != 2 || c.LooseBytes != len("four\nfive\n") {
		t.Errorf("by bytes: counts %+v", c)
	}
	if c := q.Counts("s1"); c.Waiting != 1 || c.Loose != 0 {
		t.Errorf("s1 (loaded): counts %+v", c)
	}
}

// Run writes what waits within a few passes, and Close stops it.
func TestRunWritesBehind(t *testing.T) {
	q, st := newQueue(t)
	go q.Run()
	put(q, "s1", "state", "done\n", nil)
	for deadline := time.Now().Add(10 * Every); q.Waits("s1"); time.Sleep(Every / 5) {
		if time.Now().After(deadline) {
			t.Fatal("not written within ten passes")
		}
	}
	q.Close()
	q.Close() // twice: a failed start and a stop
	if got, _ := st.file("s1/state"); got != "done\n" {
		t.Errorf("store holds %q", got)
	}
}

// FlushRel writes the value of one file (and its session's others), and
// does nothing for a file with none.
func TestFlushRel(t *testing.T) {
	q, st := newQueue(t)
	put(q, "s1", "state", "done\n", nil)
	put(q, "s2", "state", "done\n", nil)
	q.FlushRel("s1/state")
	q.FlushRel("s3/state")
	q.FlushRel("nodir")
	if got, _ := st.file("s1/state"); got != "done\n" || !q.Waits("s2") {
		t.Errorf("s1/state %q; s2 waits %v", got, q.Waits("s2"))
	}
}

// Check names what is wrong with the bookkeeping.
func TestCheckFindsBrokenBookkeeping(t *testing.T) {
	q := New(newFakeStore(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	putLoose(q, "s1", "one\n")
	q.looseBytes++
	q.byDir["s2"] = map[string]*pending{}
	err := q.Check()
	if err == nil || !strings.Contains(err.Error(), "s2: an empty directory entry") || !strings.Contains(err.Error(), "loose values 4 bytes, counted 5") {
		t.Fatalf("check of broken bookkeeping: %v", err)
	}
}
