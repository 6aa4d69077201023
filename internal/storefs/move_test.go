package storefs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// portableModes are the ways Move and Swap are tested in: the
// filesystem's own (this machine's disk has every way), every portable
// way forced (as on MooseFS), and a file moved by check and rename (as
// on a filesystem without hard links either).
var portableModes = []string{"", "all", "noreplace,exchange", "noreplace,link"}

// openForced opens the fixture's store anew with the ways forced off.
func openForced(t *testing.T, f *fixture, forced string) *Root {
	t.Helper()
	t.Setenv(PortableEnv, forced)
	r, err := Open(f.store)
	testkit.Must(t, err)
	t.Cleanup(func() { r.Close() })
	return r
}

// tree is what the store holds under home/, names, types and file bytes.
func tree(t *testing.T, f *fixture) string {
	t.Helper()
	var b strings.Builder
	filepath.Walk(f.store+"/home", func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		b.WriteString(strings.TrimPrefix(p, f.store))
		if info.Mode().IsRegular() {
			data, _ := os.ReadFile(p)
			b.WriteString(" = " + strings.TrimSuffix(string(data), "\n"))
		} else if info.IsDir() {
			b.WriteString("/")
		}
		b.WriteString("\n")
		return nil
	})
	return b.String()
}

// TestMoveNeverReplaces: a move onto an existing name (a file, a
// directory, empty or not, a file under a directory) is EEXIST, and nothing
// in the store changes, in every way Move can take.
func TestMoveNeverReplaces(t *testing.T) {
	for _, forced := range portableModes {
		t.Run("forced="+forced, func(t *testing.T) {
			f := newFixture(t)
			r := openForced(t, f, forced)
			testkit.Must(t, os.WriteFile(f.store+"/home/1000/b", []byte("other\n"), 0o600))
			testkit.Must(t, os.MkdirAll(f.store+"/home/1000/d/inner", 0o755))
			testkit.Must(t, os.MkdirAll(f.store+"/home/1000/e/inner", 0o755))
			testkit.Must(t, os.MkdirAll(f.store+"/home/1000/empty", 0o755))
			before := tree(t, f)
			for _, m := range [][2]string{
				{"home/1000/a/file", "home/1000/b"}, // file over file
				{"home/1000/d", "home/1000/e"},      // directory over a non-empty one
				{"home/1000/d", "home/1000/empty"},  // directory over an empty one (rename(2) would replace it)
				{"home/1000/d", "home/1000/b"},      // directory over a file
				{"home/1000/b", "home/1000/d"},      // file over a directory
			} {
				err := r.Move(m[0], m[1])
				if !errors.Is(err, syscall.EEXIST) {
					t.Errorf("Move(%s, %s) = %v, want EEXIST", m[0], m[1], err)
				}
			}
			if after := tree(t, f); after != before {
				t.Errorf("a refused move changed the store:\n%s\nwas:\n%s", after, before)
			}
		})
	}
}

// TestMoveMoves: a file and a directory move to free names, whole, and
// their old names are gone.
func TestMoveMoves(t *testing.T) {
	for _, forced := range portableModes {
		t.Run("forced="+forced, func(t *testing.T) {
			f := newFixture(t)
			r := openForced(t, f, forced)
			testkit.Must(t, r.Move("home/1000/a/file", "home/1000/moved"))
			testkit.Must(t, r.Move("home/1000/a", "home/1000/dir"))
			want := "/home/\n/home/1000/\n/home/1000/dir/\n/home/1000/moved = mine\n"
			if got := tree(t, f); got != want {
				t.Errorf("after the moves the store holds:\n%q\nwant:\n%q", got, want)
			}
		})
	}
}

// TestFinishMove: what a crash between the portable move's link and its
// unlink leaves (two names of one file) is finished: the old name goes,
// the moved file stays whole. Two different files are left alone.
func TestFinishMove(t *testing.T) {
	f := newFixture(t)
	testkit.Must(t, os.Link(f.store+"/home/1000/a/file", f.store+"/home/1000/a/moved"))
	testkit.Must(t, os.WriteFile(f.store+"/home/1000/a/other", []byte("other\n"), 0o600))
	testkit.Must(t, f.r.FinishMove("home/1000/a/file", "home/1000/a/moved"))
	testkit.Must(t, f.r.FinishMove("home/1000/a/other", "home/1000/a/moved"))
	testkit.Must(t, f.r.FinishMove("home/1000/a/gone", "home/1000/a/moved"))
	want := "/home/\n/home/1000/\n/home/1000/a/\n/home/1000/a/moved = mine\n/home/1000/a/other = other\n"
	if got := tree(t, f); got != want {
		t.Errorf("after FinishMove the store holds:\n%q\nwant:\n%q", got, want)
	}
}

// TestSwap: readers of the name see the new value; with RENAME_EXCHANGE
// the spare holds the old one, without it the spare is gone. A missing
// name is ENOENT, and the spare is left where it was.
func TestSwap(t *testing.T) {
	for _, forced := range []string{"", "exchange"} {
		t.Run("forced="+forced, func(t *testing.T) {
			f := newFixture(t)
			r := openForced(t, f, forced)
			dir := f.store + "/home/1000/a/"
			testkit.Must(t, os.WriteFile(dir+".file.spare", []byte("new\n"), 0o600))
			testkit.Must(t, r.Swap("home/1000/a/.file.spare", "home/1000/a/file"))
			if b, _ := os.ReadFile(dir + "file"); string(b) != "new\n" {
				t.Errorf("file holds %q after the swap, want the new value", b)
			}
			spare, err := os.ReadFile(dir + ".file.spare")
			if forced == "" && string(spare) != "mine\n" || forced != "" && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("spare after the swap: %q, %v", spare, err)
			}
			testkit.Must(t, os.WriteFile(dir+".none.spare", []byte("v\n"), 0o600))
			if err := r.Swap("home/1000/a/.none.spare", "home/1000/a/none"); !errors.Is(err, syscall.ENOENT) {
				t.Errorf("Swap to a missing name = %v, want ENOENT", err)
			}
			if b, _ := os.ReadFile(dir + ".none.spare"); string(b) != "v\n" {
				t.Errorf("a refused swap changed the spare: %q", b)
			}
		})
	}
}

// TestWays: this machine's disk gives every way the store uses; the knob
// takes them away (all, or by name); the probe leaves no scratch behind
// and removes what an interrupted probe left, but not a probe at work.
func TestWays(t *testing.T) {
	f := newFixture(t)
	old, young := f.store+"/"+ProbePrefix+"old", f.store+"/"+ProbePrefix+"young"
	for _, d := range []string{old, young} {
		testkit.Must(t, os.MkdirAll(d+"/x", 0o700))
	}
	long := time.Now().Add(-time.Hour)
	testkit.Must(t, os.Chtimes(old, long, long))
	r := openForced(t, f, "")
	w := r.Ways()
	if !w.NoReplace || !w.Exchange || !w.Resolve || !w.Link || !w.DirSync {
		t.Errorf("the local disk's ways: %+v, want every one", w)
	}
	ents, _ := os.ReadDir(f.store)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); got != ProbePrefix+"young home" {
		t.Errorf("after the probe the store's top holds %q, want the young probe's scratch and home", got)
	}
	w = openForced(t, f, "all").Ways()
	if w.NoReplace || w.Exchange || w.Tmpfile || w.Link || w.DirSync || !w.Resolve {
		t.Errorf("ways forced off by all: %+v", w)
	}
	if s := w.String(); !strings.Contains(s, "moves: portable") || !strings.Contains(s, PortableEnv+"=all") {
		t.Errorf("Ways.String() = %q, want it to say the portable moves and the knob", s)
	}
	if Portable(w.String()) != true || Portable(r.Ways().String()) {
		t.Errorf("Portable: all forced %v, the disk's own %v", Portable(w.String()), Portable(r.Ways().String()))
	}
	all := openForced(t, f, "all")
	testkit.Must(t, all.RecordWays())
	if got, err := r.RecordedWays(); err != nil || got != all.Ways().String() {
		t.Errorf("RecordedWays = %q, %v; want what RecordWays wrote", got, err)
	}
	w = openForced(t, f, "exchange").Ways()
	if !w.NoReplace || w.Exchange {
		t.Errorf("ways with exchange forced off: %+v", w)
	}
}

// TestSyncDirWithoutDirSync: where a directory cannot be synced, SyncDir
// is a no-op, not an error that would fail every send.
func TestSyncDirWithoutDirSync(t *testing.T) {
	f := newFixture(t)
	r := openForced(t, f, "dirsync")
	testkit.Must(t, r.SyncDir("home/1000/a"))
	if _, err := r.Lstat("home/1000/a"); err != nil {
		t.Fatal(err)
	}
}
