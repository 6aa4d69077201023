package index

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// base is an arbitrary fixed time for updated_at mtimes.
var base = time.Unix(1_700_000_000, 0)

// newContainer makes a container with sessions whose updated_at mtimes are
// base+i seconds, so the last name given is the newest.
func newContainer(t testing.TB, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for i, n := range names {
		mkSession(t, dir, n, base.Add(time.Duration(i)*time.Second))
	}
	return dir
}

// mkSession makes a session directory with an updated_at file of mtime m
// (no updated_at when m is zero).
func mkSession(t testing.TB, dir, name string, m time.Time) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	if m.IsZero() {
		return
	}
	u := filepath.Join(p, abi.FileUpdatedAt)
	if err := os.WriteFile(u, fmt.Appendf(nil, "%d\n", m.Unix()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(u, m, m); err != nil {
		t.Fatal(err)
	}
}

// loadAs loads the index of the container at the host path dir, through
// a store rooted at dir's parent, owned by uid and gid (0700/0600).
func loadAs(t testing.TB, dir string, uid, gid int) (*Index, error) {
	t.Helper()
	r, err := storefs.Open(filepath.Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return Load(r, filepath.Base(dir), storefs.Owner{Uid: uid, Gid: gid, DirMode: 0o700, FileMode: 0o600})
}

func load(t testing.TB, dir string) *Index {
	t.Helper()
	x, err := loadAs(t, dir, os.Getuid(), os.Getgid())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(func() { x.Close() })
	return x
}

func readString(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func notExist(t testing.TB, p string) {
	t.Helper()
	if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s: want it gone, Lstat says %v", p, err)
	}
}

// isRegular checks that p is a regular file (never a symlink) with mode 0600.
func isRegular(t testing.TB, p string) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v, want a regular file 0600", p, fi.Mode())
	}
}

// send does what the engine does for a send: it writes updated_at (its
// mtime is now) and then calls Touch, so a later Load rebuilds the same order.
func send(t testing.TB, x *Index, dir, name, cwd string) {
	t.Helper()
	now := time.Now()
	u := filepath.Join(dir, name, abi.FileUpdatedAt)
	testkit.Must(t, os.WriteFile(u, fmt.Appendf(nil, "%d\n", now.Unix()), 0o600))
	testkit.Must(t, os.Chtimes(u, now, now))
	testkit.Must(t, x.Touch(name, cwd))
}
