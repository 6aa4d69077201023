package filestamp

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func stampOf(t *testing.T, p string) Stamp {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if s := OfInfo(fi); s != Of(&st) {
		t.Fatalf("OfInfo %+v, Of %+v", s, Of(&st))
	}
	return Of(&st)
}

// TestStampSeesChanges: every way a file can change leaves another stamp,
// a rewrite of the same length with its mtime set back included (the
// ctime moves); a stat that finds nothing changed leaves the same.
func TestStampSeesChanges(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, change := range []struct {
		name string
		do   func() error
	}{
		{"nothing", func() error { return nil }},
		{"appended", func() error {
			f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
			if err == nil {
				_, err = f.WriteString("d")
				f.Close()
			}
			return err
		}},
		{"same length, mtime set back", func() error {
			fi, err := os.Stat(p)
			if err == nil {
				err = os.WriteFile(p, []byte("xbcd"), 0o644)
			}
			if err == nil {
				err = os.Chtimes(p, fi.ModTime(), fi.ModTime())
			}
			return err
		}},
		{"mode", func() error { return os.Chmod(p, 0o600) }},
		{"replaced", func() error {
			q := p + ".new"
			if err := os.WriteFile(q, []byte("xbcd"), 0o600); err != nil {
				return err
			}
			return os.Rename(q, p)
		}},
	} {
		before := stampOf(t, p)
		time.Sleep(5 * time.Millisecond) // past a coarse timestamp's tick here
		if err := change.do(); err != nil {
			t.Fatal(err)
		}
		if after := stampOf(t, p); (after == before) != (change.name == "nothing") {
			t.Errorf("%s: before %+v, after %+v", change.name, before, after)
		}
	}
}

// TestChangedWithin: a file changed now is within any window of now, and
// not within one that ended before its change.
func TestChangedWithin(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := stampOf(t, p)
	now := time.Now()
	if !s.ChangedWithin(RacyWindow, now) || s.ChangedWithin(RacyWindow, now.Add(RacyWindow+time.Second)) {
		t.Errorf("ChangedWithin: now %v, later %v", s.ChangedWithin(RacyWindow, now), s.ChangedWithin(RacyWindow, now.Add(RacyWindow+time.Second)))
	}
	if (Stamp{}).ChangedWithin(RacyWindow, now) {
		t.Error("the zero stamp changed lately")
	}
}
