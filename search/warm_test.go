package search

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestProbeMappedCut: a segment file cut under its mapping (behind the
// server, before its event is read) is a session checked again, not a
// fault that ends the server.
func TestProbeMappedCut(t *testing.T) {
	s := NewSegment([16]byte{1}, 0)
	keys := NewQuery("文件系统").Keys()
	for _, k := range keys {
		s.Filter.Add(k)
	}
	s.End = 10
	p := filepath.Join(t.TempDir(), "0")
	b := s.Encode()
	testkit.Must(t, os.WriteFile(p, b, 0o600))
	f, err := os.Open(p)
	testkit.Must(t, err)
	defer f.Close()
	h, err := ParseHeader(b, int64(len(b)))
	testkit.Must(t, err)
	m, err := unix.Mmap(int(f.Fd()), 0, len(b), unix.PROT_READ, unix.MAP_SHARED)
	testkit.Must(t, err)
	defer unix.Munmap(m)
	segs := []warmSegment{{h: h, b: m}}
	if spans, ok := probeMapped(segs, keys); !ok || len(spans) != 1 {
		t.Fatalf("whole: %v %v", spans, ok)
	}
	if spans, ok := probeMapped(segs, NewQuery("鳕鱼肝油").Keys()); !ok || len(spans) != 0 {
		t.Fatalf("absent: %v %v", spans, ok)
	}
	testkit.Must(t, os.Truncate(p, 0))
	if _, ok := probeMapped(segs, keys); ok {
		t.Fatal("a cut mapping was probed as if whole")
	}
}
