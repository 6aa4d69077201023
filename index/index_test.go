package index

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// Keys computed with an independent Python FNV-1a reference.
const (
	keyWorkspace = "cwd-990e10b3394addcf" // /workspace
	keyChinese   = "cwd-702419c5df43d49f" // /工作区/项目
)

func TestGolden(t *testing.T) {
	dir := newContainer(t, "review-1", "default") // default is newer
	x := load(t, dir)
	if got := string(x.ListBytes()); got != "default\nreview-1\n" {
		t.Fatalf("list %q", got)
	}
	testkit.Must(t, x.Touch("review-1", "/workspace"))
	if got := string(x.ListBytes()); got != "review-1\ndefault\n" {
		t.Fatalf("list after Touch %q", got)
	}
	if abi.CwdKey("/workspace") != keyWorkspace || abi.CwdKey("/工作区/项目") != keyChinese {
		t.Fatal("abi.CwdKey disagrees with the reference")
	}
	testkit.Must(t, x.Touch("default", "/工作区/项目"))
	testkit.Must(t, x.Touch("review-1", "/workspace"))
	testkit.Must(t, x.Close())

	idx := filepath.Join(dir, "index")
	want := map[string]string{
		"list":                   "review-1\ndefault\n",
		"current":                "review-1\n",
		"by-cwd/" + keyWorkspace: "review-1\n",
		"by-cwd/" + keyChinese:   "default\n",
	}
	for rel, v := range want {
		p := filepath.Join(idx, rel)
		isRegular(t, p)
		if got := readString(t, p); got != v {
			t.Errorf("%s = %q, want %q", rel, got, v)
		}
	}
	if got := x.Keys(abi.IndexByCwd); !slices.Equal(got, []string{keyChinese, keyWorkspace}) {
		t.Errorf("by-cwd keys %v", got)
	}
	if got, err := x.Lookup(abi.IndexByCwd, keyChinese); err != nil || got != "default" {
		t.Errorf("Lookup = %q, %v", got, err)
	}
}

func TestEmptyList(t *testing.T) {
	dir := newContainer(t)
	x := load(t, dir)
	if b := x.ListBytes(); len(b) != 0 || len(x.List()) != 0 || x.Current() != "" {
		t.Fatalf("empty container: list %q current %q", b, x.Current())
	}
	testkit.Must(t, x.Close())
	if got := readString(t, filepath.Join(dir, "index", "list")); got != "" {
		t.Fatalf("list file %q", got)
	}
	for _, k := range []string{"", "by-cwd", "by-hash", "by-uuid"} {
		fi, err := os.Lstat(filepath.Join(dir, "index", k))
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Errorf("index/%s: %v %v, want a 0700 directory", k, fi, err)
		}
	}
}

func TestLoadOrder(t *testing.T) {
	dir := t.TempDir()
	mkSession(t, dir, "old", base)
	mkSession(t, dir, "new", base.Add(time.Hour))
	mkSession(t, dir, "tie-b", base.Add(time.Minute))
	mkSession(t, dir, "tie-a", base.Add(time.Minute))
	mkSession(t, dir, "ns-later", base.Add(time.Minute+1)) // 1 ns newer than the ties
	mkSession(t, dir, "z-none", time.Time{})
	mkSession(t, dir, "a-none", time.Time{})
	// Not sessions: a symlink to a session, a file, a bad name, "index".
	testkit.Must(t, os.Symlink("new", filepath.Join(dir, "link")))
	testkit.Must(t, os.WriteFile(filepath.Join(dir, "file"), nil, 0o600))
	testkit.Must(t, os.Mkdir(filepath.Join(dir, ".hidden"), 0o700))
	testkit.Must(t, os.MkdirAll(filepath.Join(dir, "index"), 0o700))
	// No snapshot: the order is the mtimes' (listorder_test.go has the rest).

	x := load(t, dir)
	want := []string{"new", "ns-later", "tie-a", "tie-b", "old", "a-none", "z-none"}
	if got := x.List(); !slices.Equal(got, want) {
		t.Fatalf("List %v, want %v", got, want)
	}
	testkit.Must(t, x.Close())
	if got := readString(t, filepath.Join(dir, "index", "list")); got != string(x.ListBytes()) {
		t.Fatalf("snapshot %q", got)
	}
}

func TestLoadErrors(t *testing.T) {
	_, err := loadAs(t, filepath.Join(t.TempDir(), "missing"), os.Getuid(), os.Getgid())
	testkit.WantErrno(t, "loadAs", err, syscall.ENOENT)

	dir := t.TempDir()
	testkit.Must(t, os.WriteFile(filepath.Join(dir, "index"), nil, 0o600))
	_, err = loadAs(t, dir, os.Getuid(), os.Getgid())
	testkit.WantErrno(t, "loadAs", err, syscall.ENOTDIR)

	dir = t.TempDir()
	testkit.Must(t, os.MkdirAll(filepath.Join(dir, "index"), 0o700))
	testkit.Must(t, os.Symlink("/tmp", filepath.Join(dir, "index", "by-hash")))
	_, err = loadAs(t, dir, os.Getuid(), os.Getgid())
	testkit.WantErrno(t, "loadAs", err, syscall.ENOTDIR)
}

// Hand-edited garbage is reported and not served; entries naming a session
// that is gone are removed.
func TestLoadValidates(t *testing.T) {
	dir := newContainer(t, "a", "b")
	idx := filepath.Join(dir, "index")
	x := load(t, dir)
	testkit.Must(t, x.SetEntry(abi.IndexByHash, "good", "a"))
	testkit.Must(t, x.Close())

	put := func(rel, v string) {
		testkit.Must(t, os.WriteFile(filepath.Join(idx, rel), []byte(v), 0o600))
	}
	put("current", "a\nb\n")                                 // two lines
	put("by-hash/two", "a\n\n")                              // trailing empty line
	put("by-hash/sp", " a\n")                                // not a name
	put("by-hash/bad.d", "a\n")                              // bad key
	put("by-uuid/0000000A-0000-0000-0000-000000000000", "a") // uppercase uuid
	put("by-cwd/cwd-xyz", "a\n")                             // bad cwd key
	put("by-hash/gone", "archived\n")                        // dangling
	put("by-hash/.gone123", "a\n")                           // leftover temporary, ignored
	testkit.Must(t, os.Symlink("../current", filepath.Join(idx, "by-hash", "link")))
	testkit.Must(t, syscall.Mkfifo(filepath.Join(idx, "by-hash", "fifo"), 0o600))

	y := load(t, dir)
	if y.Current() != "" {
		t.Errorf("garbage current served: %q", y.Current())
	}
	if got := y.Keys(abi.IndexByHash); !slices.Equal(got, []string{"good"}) {
		t.Errorf("by-hash keys %v", got)
	}
	if len(y.Keys(abi.IndexByUUID)) != 0 || len(y.Keys(abi.IndexByCwd)) != 0 {
		t.Errorf("garbage keys served: %v %v", y.Keys(abi.IndexByUUID), y.Keys(abi.IndexByCwd))
	}
	if n := len(y.Problems()); n != 9 {
		t.Errorf("%d problems, want 9: %v", n, y.Problems())
	}
	notExist(t, filepath.Join(idx, "by-hash", "gone"))
	if got := readString(t, filepath.Join(idx, "by-hash", "sp")); got != " a\n" {
		t.Errorf("garbage was not left for a person to see: %q", got)
	}
	for _, p := range y.Problems() {
		if _, ok := p.(*abi.Error); !ok || p.(*abi.Error).Path == "" {
			t.Errorf("problem %v is not an *abi.Error with a path", p)
		}
	}
}

func TestTouchAppendAndAdd(t *testing.T) {
	dir := newContainer(t, "a", "b", "c")
	x := load(t, dir)
	send(t, x, dir, "c", "/w")
	testkit.Must(t, x.Close())
	x = load(t, dir) // quiet index: no pending snapshot write
	before := testkit.Snapshot(t, filepath.Join(dir, "index"), nil)

	testkit.Must(t, x.Touch("a", "")) // an append: only the list moves
	if got := x.List(); !slices.Equal(got, []string{"a", "c", "b"}) {
		t.Fatalf("List %v", got)
	}
	if x.Current() != "c" {
		t.Fatalf("append moved current to %q", x.Current())
	}
	mkSession(t, dir, "d", time.Time{})
	testkit.Must(t, x.Add("d"))
	if got := x.List(); !slices.Equal(got, []string{"d", "a", "c", "b"}) || x.Current() != "c" {
		t.Fatalf("after Add: List %v current %q", got, x.Current())
	}
	testkit.Must(t, x.Close())
	after := testkit.Snapshot(t, filepath.Join(dir, "index"), nil)
	if list := readString(t, filepath.Join(dir, "index", "list")); list != "d\na\nc\nb\n" {
		t.Errorf("list %q", list)
	}
	delete(before, "list")
	delete(after, "list")
	testkit.Same(t, "append/Add", before, after)
}

// Every error leaves the store as it was and carries the right errno.
func TestErrors(t *testing.T) {
	dir := newContainer(t, "a", "b")
	testkit.Must(t, os.Symlink("a", filepath.Join(dir, "alias")))
	testkit.Must(t, os.WriteFile(filepath.Join(dir, "plain"), nil, 0o600))
	x := load(t, dir)
	send(t, x, dir, "a", "/w")
	testkit.Must(t, x.SetEntry(abi.IndexByHash, "h", "a"))
	testkit.Must(t, x.Close())
	x = load(t, dir)
	idx := filepath.Join(dir, "index")
	before := testkit.Snapshot(t, idx, nil)
	uuid := "123e4567-e89b-12d3-a456-426614174000"

	cases := []struct {
		what  string
		errno syscall.Errno
		err   func() error
	}{
		{"Touch bad name", syscall.EINVAL, func() error { return x.Touch("../a", "/w") }},
		{"Touch index", syscall.EINVAL, func() error { return x.Touch("index", "/w") }},
		{"Touch relative cwd", syscall.EINVAL, func() error { return x.Touch("b", "w") }},
		{"Touch .. cwd", syscall.EINVAL, func() error { return x.Touch("b", "/w/../x") }},
		{"Touch LF cwd", syscall.EINVAL, func() error { return x.Touch("b", "/w\n") }},
		{"Touch missing", syscall.ENOENT, func() error { return x.Touch("nope", "/w") }},
		{"Touch symlink", syscall.ENOENT, func() error { return x.Touch("alias", "/w") }},
		{"Touch file", syscall.ENOENT, func() error { return x.Touch("plain", "") }},
		{"Add bad name", syscall.EINVAL, func() error { return x.Add("x.sock") }},
		{"Add missing", syscall.ENOENT, func() error { return x.Add("nope") }},
		{"Remove bad name", syscall.EINVAL, func() error { return x.Remove("") }},
		{"SetCurrent bad", syscall.EINVAL, func() error { return x.SetCurrent("b\n") }},
		{"SetCurrent missing", syscall.ENOENT, func() error { return x.SetCurrent("nope") }},
		{"SetCurrent symlink", syscall.ENOENT, func() error { return x.SetCurrent("alias") }},
		{"SetEntry by-cwd", syscall.EPERM, func() error { return x.SetEntry(abi.IndexByCwd, abi.CwdKey("/w"), "b") }},
		{"SetEntry kind", syscall.EINVAL, func() error { return x.SetEntry("by-x", "k", "b") }},
		{"SetEntry hash key", syscall.EINVAL, func() error { return x.SetEntry(abi.IndexByHash, ".k", "b") }},
		{"SetEntry hash key .d", syscall.EINVAL, func() error { return x.SetEntry(abi.IndexByHash, "k.d", "b") }},
		{"SetEntry hash key /", syscall.EINVAL, func() error { return x.SetEntry(abi.IndexByHash, "../k", "b") }},
		{"SetEntry uuid upper", syscall.EINVAL, func() error { return x.SetEntry(abi.IndexByUUID, "123E4567-E89B-12D3-A456-426614174000", "b") }},
		{"SetEntry uuid short", syscall.EINVAL, func() error { return x.SetEntry(abi.IndexByUUID, "123e4567", "b") }},
		{"SetEntry bad name", syscall.EINVAL, func() error { return x.SetEntry(abi.IndexByHash, "k", "index") }},
		{"SetEntry missing", syscall.ENOENT, func() error { return x.SetEntry(abi.IndexByUUID, uuid, "nope") }},
		{"RemoveEntry by-cwd", syscall.EPERM, func() error { return x.RemoveEntry(abi.IndexByCwd, abi.CwdKey("/w")) }},
		{"RemoveEntry kind", syscall.EINVAL, func() error { return x.RemoveEntry("list", "k") }},
		{"RemoveEntry bad key", syscall.EINVAL, func() error { return x.RemoveEntry(abi.IndexByHash, "a/b") }},
		{"RemoveEntry absent", syscall.ENOENT, func() error { return x.RemoveEntry(abi.IndexByUUID, uuid) }},
		{"Lookup absent", syscall.ENOENT, func() error { _, err := x.Lookup(abi.IndexByHash, "zz"); return err }},
		{"Lookup bad key", syscall.ENOENT, func() error { _, err := x.Lookup(abi.IndexByHash, ".."); return err }},
		{"Lookup kind", syscall.EINVAL, func() error { _, err := x.Lookup("current", "h"); return err }},
	}
	for _, c := range cases {
		testkit.WantErrno(t, c.what, c.err(), c.errno)
		testkit.Same(t, c.what, before, testkit.Snapshot(t, idx, nil))
	}
	if got := x.List(); !slices.Equal(got, []string{"a", "b"}) || x.Current() != "a" {
		t.Errorf("memory changed: List %v current %q", got, x.Current())
	}
	testkit.Must(t, x.Close())
	testkit.WantErrno(t, "Touch", x.Touch("a", "/w"), syscall.EIO)
	testkit.WantErrno(t, "SetCurrent", x.SetCurrent("b"), syscall.EIO)
	testkit.Same(t, "closed index", before, testkit.Snapshot(t, idx, nil))
}

func TestParseValue(t *testing.T) {
	for in, want := range map[string]string{"a": "a", "a\n": "a", "review-1\n": "review-1"} {
		got, err := ParseValue([]byte(in))
		if err != nil || got != want {
			t.Errorf("ParseValue(%q) = %q, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "\n", "a\n\n", "a\nb", "a\nb\n", " a", "a\r\n", "index\n", "../x", "a.sock", string(make([]byte, 300))} {
		_, err := ParseValue([]byte(in))
		testkit.WantErrno(t, "ParseValue", err, syscall.EINVAL)
	}
}

func TestEntries(t *testing.T) {
	dir := newContainer(t, "a", "b")
	idx := filepath.Join(dir, "index")
	x := load(t, dir)
	uuid := "123e4567-e89b-12d3-a456-426614174000"
	// A symlink planted where an entry goes is refused (EIO), left for
	// fsck to name, and never followed.
	planted := filepath.Join(idx, "by-hash", "k")
	testkit.Must(t, os.Symlink("../current", planted))
	testkit.WantErrno(t, "SetEntry", x.SetEntry(abi.IndexByHash, "k", "a"), syscall.EIO)
	if target, err := os.Readlink(planted); err != nil || target != "../current" {
		t.Fatalf("the planted link was changed: %q %v", target, err)
	}
	testkit.Must(t, os.Remove(planted))
	testkit.Must(t, x.SetEntry(abi.IndexByHash, "k", "a"))
	testkit.Must(t, x.SetEntry(abi.IndexByUUID, uuid, "a"))
	testkit.Must(t, x.SetEntry(abi.IndexByHash, "k", "b")) // replace
	testkit.Must(t, x.SetCurrent("b"))
	for _, rel := range []string{"by-hash/k", "by-uuid/" + uuid, "current"} {
		isRegular(t, filepath.Join(idx, rel))
	}
	if got := readString(t, filepath.Join(idx, "by-hash", "k")); got != "b\n" {
		t.Errorf("by-hash/k = %q", got)
	}
	if got, _ := x.Lookup(abi.IndexByHash, "k"); got != "b" {
		t.Errorf("Lookup = %q", got)
	}
	// The replaced entry no longer counts as a's: removing a leaves it.
	testkit.Must(t, x.Remove("a"))
	if got, err := x.Lookup(abi.IndexByHash, "k"); err != nil || got != "b" {
		t.Errorf("Remove(a) touched b's entry: %q %v", got, err)
	}
	notExist(t, filepath.Join(idx, "by-uuid", uuid))
	testkit.Must(t, x.RemoveEntry(abi.IndexByHash, "k"))
	notExist(t, filepath.Join(idx, "by-hash", "k"))
	_, err := x.Lookup(abi.IndexByHash, "k")
	testkit.WantErrno(t, "Lookup", err, syscall.ENOENT)
	testkit.WantErrno(t, "RemoveEntry", x.RemoveEntry(abi.IndexByHash, "k"), syscall.ENOENT)
	// Nothing but the value files and directories: no temporaries left.
	for p, v := range testkit.Snapshot(t, idx, nil) {
		if p != "." && filepath.Base(p)[0] == '.' {
			t.Errorf("leftover %s %s", p, v)
		}
	}
}

func TestRemove(t *testing.T) {
	dir := newContainer(t, "keep", "gone")
	idx := filepath.Join(dir, "index")
	x := load(t, dir)
	uuid := "123e4567-e89b-12d3-a456-426614174000"
	testkit.Must(t, x.Touch("keep", "/k"))
	testkit.Must(t, x.SetEntry(abi.IndexByHash, "kh", "keep"))
	testkit.Must(t, x.Touch("gone", "/w1"))
	testkit.Must(t, x.Touch("gone", "/w2"))
	testkit.Must(t, x.SetEntry(abi.IndexByHash, "gh", "gone"))
	testkit.Must(t, x.SetEntry(abi.IndexByUUID, uuid, "gone"))

	// Archive: the directory moves away, then the index forgets it.
	testkit.Must(t, os.Rename(filepath.Join(dir, "gone"), filepath.Join(t.TempDir(), "gone")))
	testkit.Must(t, x.Remove("gone"))
	check := func(y *Index) {
		t.Helper()
		if got := y.List(); !slices.Equal(got, []string{"keep"}) {
			t.Errorf("List %v", got)
		}
		if y.Current() != "" {
			t.Errorf("current %q", y.Current())
		}
		want := map[string][]string{abi.IndexByCwd: {abi.CwdKey("/k")}, abi.IndexByHash: {"kh"}, abi.IndexByUUID: {}}
		for k, keys := range want {
			if got := y.Keys(k); !slices.Equal(got, keys) {
				t.Errorf("%s keys %v, want %v", k, got, keys)
			}
		}
	}
	check(x)
	for _, rel := range []string{"current", "by-cwd/" + abi.CwdKey("/w1"), "by-cwd/" + abi.CwdKey("/w2"), "by-hash/gh", "by-uuid/" + uuid} {
		notExist(t, filepath.Join(idx, rel))
	}
	testkit.Must(t, x.Remove("gone"))    // again: nothing left to do
	testkit.Must(t, x.Remove("unknown")) // never indexed
	testkit.Must(t, x.Close())
	if got := readString(t, filepath.Join(idx, "list")); got != "keep\n" {
		t.Errorf("list snapshot %q", got)
	}
	y := load(t, dir)
	check(y)
	if len(y.Problems()) != 0 {
		t.Errorf("problems after a clean Remove: %v", y.Problems())
	}
}

func TestConcurrentTouch(t *testing.T) {
	names := []string{"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"}
	dir := newContainer(t, names...)
	x := load(t, dir)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 40 {
				n := names[(g+i)%len(names)]
				cwd := ""
				if i%3 != 0 {
					cwd = fmt.Sprintf("/w%d", (g*i)%5)
				}
				if err := x.Touch(n, cwd); err != nil {
					t.Error(err)
					return
				}
			}
		})
		wg.Go(func() { // readers race the writers
			for range 40 {
				x.List()
				x.ListBytes()
				x.Current()
				x.Keys(abi.IndexByCwd)
			}
		})
	}
	wg.Wait()
	got := x.List()
	if s := slices.Clone(got); len(s) != len(names) || !slices.Equal(slices.Sorted(slices.Values(s)), names) {
		t.Fatalf("List %v: want each session once", got)
	}
	testkit.Must(t, x.Close())
	idx := filepath.Join(dir, "index")
	if got := readString(t, filepath.Join(idx, "list")); got != string(x.ListBytes()) {
		t.Errorf("snapshot %q, memory %q", got, x.ListBytes())
	}
	if got := readString(t, filepath.Join(idx, "current")); got != x.Current()+"\n" {
		t.Errorf("current file %q, memory %q", got, x.Current())
	}
	y := load(t, dir)
	for _, k := range x.Keys(abi.IndexByCwd) {
		a, _ := x.Lookup(abi.IndexByCwd, k)
		b, err := y.Lookup(abi.IndexByCwd, k)
		if err != nil || a != b {
			t.Errorf("%s: memory %q, store %q %v", k, a, b, err)
		}
		isRegular(t, filepath.Join(idx, abi.IndexByCwd, k))
	}
	if len(x.Keys(abi.IndexByCwd)) != 5 || y.Current() != x.Current() {
		t.Errorf("keys %v, current %q vs %q", x.Keys(abi.IndexByCwd), x.Current(), y.Current())
	}
}

// The snapshot follows changes in the background without Close.
func TestSnapshotFlush(t *testing.T) {
	dir := newContainer(t, "a", "b", "c")
	x := load(t, dir)
	p := filepath.Join(dir, "index", "list")
	for _, n := range []string{"a", "b", "a", "c", "a"} {
		testkit.Must(t, x.Touch(n, ""))
	}
	want := "a\nc\nb\n"
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(p)
		if string(b) == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot %q after 5s, want %q", b, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	isRegular(t, p)
}

// As root, everything created belongs to the container's uid/gid.
func TestOwnership(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	dir := newContainer(t, "a")
	x, err := loadAs(t, dir, 4242, 4343)
	testkit.Must(t, err)
	testkit.Must(t, x.Touch("a", "/w"))
	testkit.Must(t, x.SetEntry(abi.IndexByHash, "h", "a"))
	testkit.Must(t, x.Close())
	for rel := range testkit.Snapshot(t, filepath.Join(dir, "index"), nil) {
		p := filepath.Join(dir, "index", rel)
		fi, err := os.Lstat(p)
		testkit.Must(t, err)
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != 4242 || st.Gid != 4343 {
			t.Errorf("%s owned by %d:%d", p, st.Uid, st.Gid)
		}
	}
}

// TestOnChange: every mutation names, to the OnChange function, exactly
// the files of the index whose content it changed, before it returns; a
// touch of the session already on top, and a value written again, name
// nothing.
func TestOnChange(t *testing.T) {
	dir := newContainer(t, "a", "b")
	x := load(t, dir)
	var got []string
	x.OnChange(func(rels ...string) { got = append(got, rels...) })
	c := filepath.Base(dir) + "/index/"
	step := func(what string, err error, want ...string) {
		t.Helper()
		testkit.Must(t, err)
		if !slices.Equal(got, want) {
			t.Errorf("%s: announced %q, want %q", what, got, want)
		}
		got = nil
	}
	step("a send", x.Touch("a", "/w"), c+"list", c+"by-cwd/"+abi.CwdKey("/w"), c+"current")
	step("the same send again", x.Touch("a", "/w"))
	step("an append to b", x.Touch("b", ""), c+"list")
	step("current := b", x.SetCurrent("b"), c+"current")
	step("a by-hash entry", x.SetEntry(abi.IndexByHash, "k", "a"), c+"by-hash/k")
	step("the same entry again", x.SetEntry(abi.IndexByHash, "k", "a"))
	step("its removal", x.RemoveEntry(abi.IndexByHash, "k"), c+"by-hash/k")
	step("b removed", x.Remove("b"), c+"list", c+"current")
}
