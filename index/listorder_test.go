package index

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// setMtime sets the mtime (and atime) of a host path.
func setMtime(t testing.TB, p string, m time.Time) {
	t.Helper()
	testkit.Must(t, os.Chtimes(p, m, m))
}

// restartQuiet closes x, loads the container again and checks that the
// restart wrote nothing in the container (a Load that finds its snapshot
// exact schedules no write, and so Close has none to do either).
func restartQuiet(t *testing.T, x *Index, dir string) *Index {
	t.Helper()
	testkit.Must(t, x.Close())
	before := testkit.Snapshot(t, dir, nil)
	y := load(t, dir)
	if p := y.Problems(); len(p) != 0 {
		t.Fatalf("problems after a clean Close: %v", p)
	}
	time.Sleep(50 * time.Millisecond) // room for a flusher that should not run
	testkit.Must(t, y.Close())
	testkit.Same(t, "a clean restart", before, testkit.Snapshot(t, dir, nil))
	return load(t, dir)
}

// Many sends within one second: updated_at mtimes tie (the engine rewrites
// updated_at only when the second changes), yet List after Close and Load
// is exactly what it was, and stays so over further restarts.
func TestListSurvivesRestartWithinASecond(t *testing.T) {
	names := make([]string, 40)
	for i := range names {
		names[i] = fmt.Sprintf("s%02d", i)
	}
	dir := newContainer(t, names...)
	sec := time.Now().Truncate(time.Second)
	for _, n := range names {
		setMtime(t, filepath.Join(dir, n, abi.FileUpdatedAt), sec)
	}
	x := load(t, dir)
	// 200 sends in an order neither by name nor by creation.
	for i := range 200 {
		n := names[(i*17+i*i)%len(names)]
		cwd := ""
		if i%2 == 0 {
			cwd = fmt.Sprintf("/w%d", i%7)
		}
		testkit.Must(t, x.Touch(n, cwd))
	}
	want := x.ListBytes()
	if slices.IsSorted(x.List()) {
		t.Fatalf("the sends left the list sorted by name, proving nothing: %q", want)
	}
	for round := range 3 {
		x = restartQuiet(t, x, dir)
		if got := x.ListBytes(); string(got) != string(want) {
			t.Fatalf("round %d: list after a clean restart\n%q\nwant\n%q", round, got, want)
		}
		if got := readString(t, filepath.Join(dir, "index", "list")); got != string(want) {
			t.Fatalf("round %d: snapshot %q", round, got)
		}
	}

	// A send to the session on top changes no order, so nothing is
	// written; its updated_at is now newer than the snapshot, and a clean
	// restart still gives the same list.
	top := x.List()[0]
	time.Sleep(10 * time.Millisecond)
	send(t, x, dir, top, "/w0")
	x = restartQuiet(t, x, dir)
	if got := x.ListBytes(); string(got) != string(want) {
		t.Fatalf("after a send to the top session: %q, want %q", got, want)
	}

	// The clock is stepped back after that send: its updated_at is in the
	// future, newer than any snapshot written since, yet says nothing of
	// the order.
	setMtime(t, filepath.Join(dir, top, abi.FileUpdatedAt), time.Now().Add(time.Hour))
	// And after more sends in another second, with updated_at rewritten.
	for _, n := range []string{names[3], names[30], names[3], names[11]} {
		send(t, x, dir, n, "")
	}
	want = x.ListBytes()
	x = restartQuiet(t, x, dir)
	if got := x.ListBytes(); string(got) != string(want) {
		t.Fatalf("after more sends: %q, want %q", got, want)
	}
}

// After a crash the snapshot may lag: the sessions touched after it was
// written and those it does not name go in front by mtime, the others keep
// its order, and names of sessions that are gone are dropped.
func TestListAfterCrash(t *testing.T) {
	dir := t.TempDir()
	snapAt := base.Add(10 * time.Second)
	mkSession(t, dir, "a", base.Add(1*time.Second))
	mkSession(t, dir, "b", base.Add(2*time.Second))
	mkSession(t, dir, "c", snapAt) // the same instant as the snapshot: not newer
	mkSession(t, dir, "d", time.Time{})
	mkSession(t, dir, "e", base.Add(20*time.Second))  // listed, touched after
	mkSession(t, dir, "f", base.Add(5*time.Second))   // not listed (older, still missed)
	mkSession(t, dir, "g", time.Time{})               // not listed, no updated_at
	mkSession(t, dir, "h", base.Add(30*time.Second))  // not listed, newest
	mkSession(t, dir, "i", base.Add(-30*time.Second)) // listed first, oldest mtime
	idx := filepath.Join(dir, "index")
	testkit.Must(t, os.MkdirAll(idx, 0o700))
	p := filepath.Join(idx, "list")
	testkit.Must(t, os.WriteFile(p, []byte("i\nc\nb\ne\ngone\na\nd\n"), 0o600))
	setMtime(t, p, snapAt)

	x := load(t, dir)
	want := []string{"h", "e", "f", "g", "i", "c", "b", "a", "d"}
	if got := x.List(); !slices.Equal(got, want) {
		t.Fatalf("List %v, want %v", got, want)
	}
	if p := x.Problems(); len(p) != 0 {
		t.Errorf("a lagging snapshot is not a problem: %v", p)
	}
	x = restartQuiet(t, x, dir) // Close wrote the new order: now exact
	if got := x.List(); !slices.Equal(got, want) {
		t.Fatalf("List after the next restart %v, want %v", got, want)
	}
	if got := readString(t, p); got != strings.Join(want, "\n")+"\n" {
		t.Errorf("snapshot %q", got)
	}
}

// A snapshot that is not a regular file, too large, or not a list of
// distinct session names is not trusted: the order is the mtimes', and it is
// reported in Problems.
func TestListSnapshotNotTrusted(t *testing.T) {
	// By mtime the order is c, b, a; every planted snapshot says a, b, c.
	const byMtime = "c\nb\na\n"
	var large strings.Builder
	for i := range 20_000 { // distinct valid names, but far more than 3 sessions explain
		fmt.Fprintf(&large, "x%d\n", i)
	}
	cases := []struct {
		what  string
		errno syscall.Errno
		plant func(t *testing.T, p string)
		stays bool // not a regular file: the next write refuses it too
	}{
		{"garbage line", syscall.EINVAL, writeList("a\nb\n../c\nc\n"), false},
		{"reserved name", syscall.EINVAL, writeList("a\nindex\nb\nc\n"), false},
		{"empty line", syscall.EINVAL, writeList("a\n\nb\nc\n"), false},
		{"listed twice", syscall.EINVAL, writeList("a\nb\na\nc\n"), false},
		{"torn last line", syscall.EINVAL, writeList("a\nb\nc"), false},
		{"too large", syscall.EFBIG, writeList("a\nb\nc\n" + large.String()), false},
		{"symlink", syscall.EIO, func(t *testing.T, p string) {
			target := filepath.Join(t.TempDir(), "list")
			testkit.Must(t, os.WriteFile(target, []byte("a\nb\nc\n"), 0o600))
			testkit.Must(t, os.Symlink(target, p))
		}, true},
		{"FIFO", syscall.EIO, func(t *testing.T, p string) {
			testkit.Must(t, syscall.Mkfifo(p, 0o600))
		}, true},
		{"directory", syscall.EIO, func(t *testing.T, p string) {
			testkit.Must(t, os.Mkdir(p, 0o700))
		}, true},
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			dir := newContainer(t, "a", "b", "c")
			idx := filepath.Join(dir, "index")
			testkit.Must(t, os.MkdirAll(idx, 0o700))
			p := filepath.Join(idx, "list")
			c.plant(t, p)
			if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
				setMtime(t, p, time.Now()) // newer than every session: trusted, it would win
			}
			x := load(t, dir)
			before := testkit.Snapshot(t, idx, nil) // Load made the entry directories
			if got := string(x.ListBytes()); got != byMtime {
				t.Errorf("List %q, want the mtimes' %q", got, byMtime)
			}
			probs := x.Problems()
			if len(probs) != 1 {
				t.Fatalf("problems %v, want one for index/list", probs)
			}
			testkit.WantErrno(t, "Problems", probs[0], c.errno)
			if e := probs[0].(*abi.Error); !strings.HasSuffix(e.Path, "/index/list") || !strings.Contains(e.Msg, "not trusted") {
				t.Errorf("problem %v does not name index/list as not trusted", e)
			}
			err := x.Close()
			if c.stays {
				// Never followed, opened or replaced: left for fsck.
				testkit.WantErrno(t, "Close", err, syscall.EIO)
				testkit.Same(t, "a refused snapshot", before, testkit.Snapshot(t, idx, nil))
				return
			}
			testkit.Must(t, err)
			if got := readString(t, p); got != byMtime {
				t.Errorf("snapshot rewritten as %q, want %q", got, byMtime)
			}
		})
	}
}

func writeList(content string) func(t *testing.T, p string) {
	return func(t *testing.T, p string) {
		testkit.Must(t, os.WriteFile(p, []byte(content), 0o600))
	}
}

// An empty snapshot of an empty container is exact: nothing is rewritten.
func TestListEmptySnapshotQuiet(t *testing.T) {
	dir := newContainer(t)
	x := load(t, dir)
	restartQuiet(t, x, dir)
}

func TestParseList(t *testing.T) {
	for in, want := range map[string][]string{"": nil, "a\n": {"a"}, "b\na\n": {"b", "a"}} {
		got, err := parseList([]byte(in))
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("parseList(%q) = %q, %v", in, got, err)
		}
	}
	for _, in := range []string{"\n", "a", "a\n\n", "a\nb", "a\na\n", " a\n", "a\r\n", "index\n", "x.sock\n", strings.Repeat("a", 65) + "\n"} {
		_, err := parseList([]byte(in))
		testkit.WantErrno(t, "parseList", err, syscall.EINVAL)
	}
}
