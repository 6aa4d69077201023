package storefs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
	"golang.org/x/sys/unix"
)

// fixture is a store with home/1000/a/file, and a decoy tree outside it
// that planted links point at.
type fixture struct {
	r     *Root
	store string
	decoy string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	base := t.TempDir()
	f := &fixture{store: filepath.Join(base, "store"), decoy: filepath.Join(base, "decoy")}
	for _, d := range []string{f.store + "/home/1000/a", f.decoy + "/dir"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Must(t, os.WriteFile(f.store+"/home/1000/a/file", []byte("mine\n"), 0o600))
	testkit.Must(t, os.WriteFile(f.decoy+"/secret", []byte("root only\n"), 0o600))
	testkit.Must(t, os.WriteFile(f.decoy+"/dir/secret", []byte("root only\n"), 0o600))
	r, err := Open(f.store)
	testkit.Must(t, err)
	t.Cleanup(func() { r.Close() })
	f.r = r
	return f
}

// decoyState is what the decoy tree holds, owners and modes included.
func (f *fixture) decoyState(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	filepath.Walk(f.decoy, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		st := info.Sys().(*syscall.Stat_t)
		b.WriteString(p + " " + info.Mode().String() + " " + itoa(st.Uid) + ":" + itoa(st.Gid))
		if info.Mode().IsRegular() {
			data, _ := os.ReadFile(p)
			b.WriteString(" " + string(data))
		}
		b.WriteString("\n")
		return nil
	})
	return b.String()
}

func itoa(u uint32) string { return strconv.FormatUint(uint64(u), 10) }

func wantUnsafe(t *testing.T, what string, err error) {
	t.Helper()
	if !IsUnsafe(err) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("%s: got %v, want an UnsafeError (EIO)", what, err)
	}
}

// Every operation meets a symlink planted at each depth and neither
// follows it nor touches what it points at.
func TestPlantedSymlinksAreNeverFollowed(t *testing.T) {
	for _, at := range []string{"home", "home/1000", "home/1000/a"} {
		t.Run(strings.ReplaceAll(at, "/", "_"), func(t *testing.T) {
			f := newFixture(t)
			// Replace the directory at `at` by a link to the decoy.
			testkit.Must(t, os.Rename(filepath.Join(f.store, at), filepath.Join(f.store, at)+".moved"))
			testkit.Must(t, os.Symlink(f.decoy, filepath.Join(f.store, at)))
			before := f.decoyState(t)
			below := "home/1000/a"
			ops := map[string]func() error{
				"open":    func() error { _, err := f.r.OpenFile(below+"/../a/file", unix.O_RDONLY, 0); return err },
				"read":    func() error { _, err := f.r.ReadFile("home/1000/a/secret", 100); return err },
				"create":  func() error { _, err := f.r.OpenFile("home/1000/a/new", unix.O_WRONLY|unix.O_CREAT, 0o600); return err },
				"mkdir":   func() error { return f.r.Mkdir("home/1000/a/newdir", 0o700) },
				"remove":  func() error { return f.r.Remove("home/1000/a/secret") },
				"chmod":   func() error { return f.r.Chmod("home/1000/a/secret", 0o777) },
				"chown":   func() error { return f.r.Chown("home/1000/a/secret", 1000, 1000) },
				"utimes":  func() error { return f.r.Utimes("home/1000/a/secret", [2]unix.Timespec{{Sec: 1}, {Sec: 1}}) },
				"stat":    func() error { _, err := f.r.Lstat("home/1000/a/secret"); return err },
				"readdir": func() error { _, err := f.r.ReadDir("home/1000/a"); return err },
				"dirpath": func() error { _, err := f.r.OpenDirPath("home/1000/a"); return err },
				"replace": func() error {
					return f.r.ReplaceFile("home/1000/a/secret", []byte("x"), Owner{-1, -1, 0o700, 0o600}, SyncAll)
				},
				"rename":  func() error { return f.r.Rename("home/1000/a/secret", "home/1000/a/other", 0) },
				"rmall":   func() error { return f.r.RemoveAll("home/1000/a/dir") },
				"symlink": func() error { return f.r.Symlink("/etc", "home/1000/a/l") },
				"mknod":   func() error { return f.r.Mknod("home/1000/a/fifo", unix.S_IFIFO|0o600, 0) },
			}
			for name, op := range ops {
				err := op()
				if name == "open" {
					if !errors.Is(err, unix.EINVAL) {
						t.Errorf("open with ..: %v, want EINVAL", err)
					}
					continue
				}
				if !IsUnsafe(err) {
					t.Errorf("%s through a symlink at %s: %v, want an UnsafeError", name, at, err)
				}
			}
			if after := f.decoyState(t); after != before {
				t.Fatalf("the decoy changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// A symlink, FIFO or directory where a regular file is expected is
// refused without opening it: a FIFO would block an open for reading.
func TestWrongTypesAreRefused(t *testing.T) {
	f := newFixture(t)
	a := filepath.Join(f.store, "home/1000/a")
	testkit.Must(t, os.Symlink(f.decoy+"/secret", a+"/link"))
	testkit.Must(t, unix.Mkfifo(a+"/fifo", 0o600))
	testkit.Must(t, os.Mkdir(a+"/dir", 0o700))
	before := f.decoyState(t)
	for _, name := range []string{"link", "fifo", "dir"} {
		done := make(chan error, 1)
		go func() {
			_, err := f.r.ReadFile("home/1000/a/"+name, 100)
			done <- err
		}()
		select {
		case err := <-done:
			wantUnsafe(t, "read "+name, err)
		case <-time.After(5 * time.Second):
			t.Fatalf("reading a %s blocked", name)
		}
		_, err := f.r.OpenFile("home/1000/a/"+name, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, 0o600)
		wantUnsafe(t, "create over "+name, err)
	}
	_, err := f.r.OpenDir("home/1000/a/file")
	wantUnsafe(t, "opendir of a file", err)
	_, err = f.r.OpenDir("home/1000/a/link")
	wantUnsafe(t, "opendir of a link", err)
	for _, name := range []string{"file", "link", "fifo"} {
		_, err = f.r.OpenDirPath("home/1000/a/" + name)
		wantUnsafe(t, "a directory's path of a "+name, err)
	}
	// The link itself is seen, changed and removed as a link.
	st, err := f.r.Lstat("home/1000/a/link")
	testkit.Must(t, err)
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		t.Fatalf("lstat of a link: mode %o", st.Mode)
	}
	if err := f.r.Chmod("home/1000/a/link", 0o777); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Fatalf("chmod of a link: %v, want EOPNOTSUPP", err)
	}
	testkit.Must(t, f.r.Chown("home/1000/a/link", 1000, 1000))
	testkit.Must(t, f.r.Utimes("home/1000/a/link", [2]unix.Timespec{{Sec: 5}, {Sec: 5}}))
	target, err := f.r.Readlink("home/1000/a/link")
	testkit.Must(t, err)
	if string(target) != f.decoy+"/secret" {
		t.Fatalf("readlink: %q", target)
	}
	// A link where a value should be is refused, not silently replaced:
	// fsck must still find it.
	wantUnsafe(t, "replace over a link", f.r.ReplaceFile("home/1000/a/link", []byte("value\n"), Owner{-1, -1, 0o700, 0o600}, SyncAll))
	if target, _ := os.Readlink(a + "/link"); target != f.decoy+"/secret" {
		t.Fatalf("replace over a link changed it: %q", target)
	}
	testkit.Must(t, os.Symlink(f.decoy+"/dir", a+"/dirlink"))
	testkit.Must(t, f.r.RemoveAll("home/1000/a/dirlink"))
	if after := f.decoyState(t); after != before {
		t.Fatalf("the decoy changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

func TestFilesAndDirectories(t *testing.T) {
	f := newFixture(t)
	old := unix.Umask(0o077)
	defer unix.Umask(old)
	testkit.Must(t, f.r.Mkdir("home/1000/b", 0o770|os.ModeSetgid))
	st, err := f.r.Lstat("home/1000/b")
	testkit.Must(t, err)
	if st.Mode&07777 != 0o2770 {
		t.Fatalf("mkdir mode %o, want 2770 whatever the umask", st.Mode&07777)
	}
	w, err := f.r.OpenFile("home/1000/b/v", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o660)
	testkit.Must(t, err)
	w.Write([]byte("one\n"))
	w.Close()
	if _, err := f.r.OpenFile("home/1000/b/v", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o660); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("exclusive create of an existing file: %v", err)
	}
	st, _ = f.r.Lstat("home/1000/b/v")
	if st.Mode&0o777 != 0o660 {
		t.Fatalf("file mode %o, want 660", st.Mode&0o777)
	}
	testkit.Must(t, f.r.ReplaceFile("home/1000/b/v", []byte("two\n"), Owner{1000, 1000, 0o750, 0o640}, SyncAll))
	b, err := f.r.ReadFile("home/1000/b/v", 10)
	testkit.Must(t, err)
	if string(b) != "two\n" {
		t.Fatalf("read %q", b)
	}
	if _, err := f.r.ReadFile("home/1000/b/v", 2); !errors.Is(err, unix.EFBIG) {
		t.Fatalf("read over the limit: %v", err)
	}
	st, _ = f.r.Lstat("home/1000/b/v")
	if st.Uid != 1000 || st.Mode&0o777 != 0o640 {
		t.Fatalf("replaced file: uid %d mode %o", st.Uid, st.Mode&0o777)
	}
	ents, err := f.r.ReadDir("home/1000/b")
	testkit.Must(t, err)
	if len(ents) != 1 || ents[0].Name != "v" || !ents[0].IsRegular() {
		t.Fatalf("readdir: %+v (no temporary may remain)", ents)
	}
	tmp, err := f.r.MkdirTemp("home/1000", ".new-x-", 0o700)
	testkit.Must(t, err)
	if !strings.HasPrefix(tmp, "home/1000/.new-x-") {
		t.Fatalf("temp dir %s", tmp)
	}
	testkit.Must(t, f.r.Rename("home/1000/b", tmp, unix.RENAME_EXCHANGE))
	if err := f.r.Rename("home/1000/a", "home/1000/b", unix.RENAME_NOREPLACE); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("rename noreplace onto an existing name: %v", err)
	}
	testkit.Must(t, f.r.RemoveAll(tmp))
	if _, err := f.r.Lstat(tmp); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("removed dir: %v", err)
	}
	if _, err := f.r.Statfs(); err != nil {
		t.Fatal(err)
	}
	testkit.Must(t, f.r.SyncDir("home/1000"))
}

// Paths in errors are shown as the caller asked: under the mount root for
// clients, never the store's host path.
func TestErrorsShowTheChosenPrefix(t *testing.T) {
	f := newFixture(t)
	_, err := f.r.ShowAs("/ctx").ReadFile("home/1000/a/missing", 10)
	if err == nil || !strings.Contains(err.Error(), "/ctx/home/1000/a/missing") || strings.Contains(err.Error(), f.store) {
		t.Fatalf("error %v", err)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("errno lost: %v", err)
	}
}

func TestSecure(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make directories of other owners")
	}
	base := t.TempDir()
	os.Chmod(base, 0o755)
	store := filepath.Join(base, "store")
	testkit.Must(t, os.Mkdir(store, 0o755))
	testkit.Must(t, Secure(store))
	st, _ := os.Stat(store)
	if st.Mode().Perm() != 0o700 {
		t.Fatalf("store mode %v, want 0700", st.Mode())
	}
	// A parent another uid owns, or that everyone may write, is refused.
	testkit.Must(t, os.Chown(base, 1001, 1001))
	if err := Secure(store); err == nil || !strings.Contains(err.Error(), "uid 1001") {
		t.Fatalf("parent owned by 1001: %v", err)
	}
	testkit.Must(t, os.Chown(base, 0, 0))
	testkit.Must(t, os.Chmod(base, 0o777))
	if err := Secure(store); err == nil || !strings.Contains(err.Error(), "every user") || !strings.Contains(err.Error(), "chmod go-w") {
		t.Fatalf("world-writable parent: %v", err)
	}
	testkit.Must(t, syscall.Chmod(base, 0o1777)) // sticky, as /tmp
	testkit.Must(t, Secure(store))
	testkit.Must(t, os.Chown(store, 1001, 1001))
	if err := Secure(store); err == nil || !strings.Contains(err.Error(), "belongs to uid 1001") {
		t.Fatalf("store owned by 1001: %v", err)
	}
}

// A store path that is a symlink, or that goes through one, is refused,
// and the link's target keeps its mode and stays empty (the old Secure
// resolved the link, chmodded the target 0700 and the store filled it).
func TestSecureRefusesSymlinks(t *testing.T) {
	base := t.TempDir()
	target := filepath.Join(base, "target")
	testkit.Must(t, os.Mkdir(target, 0o755))
	testkit.Must(t, os.Symlink(target, filepath.Join(base, "link")))
	for _, store := range []string{filepath.Join(base, "link"), filepath.Join(base, "link", "store")} {
		_, err := OpenPrivate(store)
		var link *SymlinkError
		if !errors.As(err, &link) || !errors.Is(err, syscall.ELOOP) || !strings.Contains(err.Error(), "store "+store) {
			t.Fatalf("OpenPrivate(%s): %v, want a *SymlinkError naming it", store, err)
		}
		st, _ := os.Stat(target)
		if ents, _ := os.ReadDir(target); st.Mode().Perm() != 0o755 || len(ents) != 0 {
			t.Fatalf("the link's target changed: mode %v, entries %v", st.Mode(), ents)
		}
	}
}

// CheckRoot: the root, its agent/ and model/ must be root's (or mine) and
// writable by no one else, sticky or not; a directory above may be
// sticky; a missing root is checked where it would go.
func TestCheckRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make directories of other owners")
	}
	base := t.TempDir()
	testkit.Must(t, os.Chmod(base, 0o755))
	root := filepath.Join(base, "ctx")
	testkit.Must(t, CheckRoot(root, 0)) // not there yet: its parent is root's
	testkit.Must(t, os.MkdirAll(filepath.Join(root, "agent"), 0o755))
	testkit.Must(t, CheckRoot(root, 0))
	for _, c := range []struct {
		dir  string
		mode uint32
		uid  int
		who  string
	}{
		{root, 0o755, 1001, "its owner, uid 1001"},
		{root, 0o1777, 0, "every user"},
		{filepath.Join(root, "agent"), 0o775, 0, "the members of group 0"},
		{filepath.Join(root, "agent"), 0o755, 1001, "its owner, uid 1001"},
		{base, 0o777, 0, "every user"},
	} {
		testkit.Must(t, syscall.Chmod(c.dir, c.mode))
		testkit.Must(t, os.Chown(c.dir, c.uid, 0))
		err := CheckRoot(root, 0)
		var open *OpenToOthersError
		if !errors.As(err, &open) || open.Path != c.dir || open.Who != c.who || !strings.Contains(err.Error(), "mount root "+root) ||
			!strings.Contains(err.Error(), "chown root:root "+c.dir+" && chmod go-w "+c.dir) {
			t.Errorf("%s mode %o uid %d: %v, want it named (%s) with the fix", c.dir, c.mode, c.uid, err, c.who)
		}
		testkit.Must(t, syscall.Chmod(c.dir, 0o755))
		testkit.Must(t, os.Chown(c.dir, 0, 0))
	}
	testkit.Must(t, syscall.Chmod(base, 0o1777)) // sticky above, as /tmp: fine
	testkit.Must(t, CheckRoot(root, 0))
}

// An existing file opens with O_NOFOLLOW (SQLite opens its database so,
// through the mount): the reopen through /proc/self/fd must not take its
// magic link for a symlink to refuse (ELOOP), and a planted symlink is
// still refused.
func TestOpenExistingWithNoFollow(t *testing.T) {
	f := newFixture(t)
	for _, flags := range []int{unix.O_RDONLY | unix.O_NOFOLLOW, unix.O_RDWR | unix.O_CREAT | unix.O_NOFOLLOW} {
		file, err := f.r.OpenFile("home/1000/a/file", flags, 0o600)
		testkit.Must(t, err)
		file.Close()
	}
	testkit.Must(t, os.Symlink(f.decoy+"/secret", f.store+"/home/1000/a/link"))
	if _, err := f.r.OpenFile("home/1000/a/link", unix.O_RDWR|unix.O_NOFOLLOW, 0); err == nil {
		t.Fatal("a planted symlink opened")
	}
}

// OpenDirPath opens a directory as a place to walk from: O_PATH (its
// filesystem is not asked to open it), good as openat2's dirfd.
func TestOpenDirPath(t *testing.T) {
	f := newFixture(t)
	d, err := f.r.OpenDirPath("home/1000/a")
	testkit.Must(t, err)
	defer d.Close()
	fl, err := unix.FcntlInt(d.Fd(), unix.F_GETFL, 0)
	testkit.Must(t, err)
	if fl&unix.O_PATH == 0 {
		t.Fatalf("flags %#x: not O_PATH", fl)
	}
	fd, err := unix.Openat2(int(d.Fd()), "file", &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH})
	testkit.Must(t, err)
	unix.Close(fd)
}

// deepTree makes 40 directories of 200-byte names below home/1000/a, 8
// KiB of path (by descriptors, as a user can by moving directories),
// each holding a link to the decoy's dir, and returns the deepest one
// open.
func (f *fixture) deepTree(t *testing.T) int {
	t.Helper()
	fd, err := unix.Open(f.store+"/home/1000/a", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	testkit.Must(t, err)
	name := strings.Repeat("d", 200)
	for i := 0; i < 40; i++ { // 8 KiB of path
		testkit.Must(t, unix.Mkdirat(fd, name, 0o700))
		testkit.Must(t, unix.Symlinkat(f.decoy+"/dir", fd, "link"))
		next, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		testkit.Must(t, err)
		unix.Close(fd)
		fd = next
	}
	return fd
}

// TestRemoveAllDeeperThanAPath: a tree deeper than PATH_MAX (made by
// descriptors, as a user can by moving directories) is removed whole,
// its links as links.
func TestRemoveAllDeeperThanAPath(t *testing.T) {
	f := newFixture(t)
	before := f.decoyState(t)
	fd := f.deepTree(t)
	testkit.Must(t, unix.Mkfifoat(fd, "fifo", 0o600))
	unix.Close(fd)
	testkit.Must(t, f.r.RemoveAll("home/1000/a"))
	if _, err := os.Lstat(f.store + "/home/1000/a"); !os.IsNotExist(err) {
		t.Fatalf("home/1000/a after RemoveAll: %v", err)
	}
	if after := f.decoyState(t); after != before {
		t.Fatalf("the decoy changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestWalkTreeDeeperThanAPath: WalkTree visits every name of a tree
// deeper than PATH_MAX, links as links (never into the decoy), and stops
// when told.
func TestWalkTreeDeeperThanAPath(t *testing.T) {
	f := newFixture(t)
	fd := f.deepTree(t)
	unix.Close(fd)
	kinds := map[uint32]int{}
	testkit.Must(t, f.r.WalkTree("home/1000/a", func(st *unix.Stat_t) bool {
		kinds[st.Mode&unix.S_IFMT]++
		return true
	}))
	// a, its file, 40 directories and 40 links.
	if kinds[unix.S_IFDIR] != 41 || kinds[unix.S_IFLNK] != 40 || kinds[unix.S_IFREG] != 1 {
		t.Fatalf("walked %v", kinds)
	}
	n := 0
	testkit.Must(t, f.r.WalkTree("home/1000/a", func(*unix.Stat_t) bool { n++; return n < 5 }))
	if n != 5 {
		t.Fatalf("a walk told to stop at 5 visited %d", n)
	}
}
