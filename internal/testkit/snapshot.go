package testkit

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// Snapshot maps every path under dir to its mode and, for regular files,
// the SHA-256 of its content and its mtime, for symlinks their target. Paths for which skip returns
// true are left out (a skipped directory with all it holds).
func Snapshot(t testing.TB, dir string, skip func(rel string) bool) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if skip != nil && skip(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		v := info.Mode().String()
		if info.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			v += fmt.Sprintf(" %x %d", sha256.Sum256(b), info.ModTime().UnixNano())
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			v += " -> " + target
		}
		out[rel] = v
		return nil
	})
	return out
}

// Diff lists, sorted, what differs between two snapshots: "changed or
// removed: <path>" and "added: <path>".
func Diff(before, after map[string]string) []string {
	var diffs []string
	for k, v := range before {
		if after[k] != v {
			diffs = append(diffs, "changed or removed: "+k)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			diffs = append(diffs, "added: "+k)
		}
	}
	sort.Strings(diffs)
	return diffs
}

// Same fails the test, listing the differences, unless the snapshots are
// identical.
func Same(t testing.TB, what string, before, after map[string]string) {
	t.Helper()
	if diffs := Diff(before, after); len(diffs) > 0 {
		t.Fatalf("%s wrote:\n%s", what, strings.Join(diffs, "\n"))
	}
}

// Settled is a Snapshot of dir once it stopped changing: two snapshots
// quiet apart agree (within 20 tries). A server writes some files behind
// its acknowledgements (derived values, at most half a second later), so
// a "nothing was written" check must start from a store that settled.
func Settled(t testing.TB, dir string, skip func(rel string) bool, quiet time.Duration) map[string]string {
	t.Helper()
	last := Snapshot(t, dir, skip)
	for range 20 {
		time.Sleep(quiet)
		now := Snapshot(t, dir, skip)
		if len(Diff(last, now)) == 0 {
			return now
		}
		last = now
	}
	t.Fatalf("%s keeps changing", dir)
	return nil
}

// WriteFile writes content to p with mode (chmod'ed, whatever the umask),
// making p's directories first.
func WriteFile(t testing.TB, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}
