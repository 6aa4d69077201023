package sealedlog

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// damage is something done to a log behind the store's back.
type damage struct {
	name  string
	do    func(t *testing.T, p string)
	words string // what Check must say
}

func writeAt(t *testing.T, p string, b []byte, off int64) {
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func truncate(t *testing.T, p string, by int64) {
	st, _ := os.Stat(p)
	if err := os.Truncate(p, st.Size()-by); err != nil {
		t.Fatal(err)
	}
}

// replace puts content at p by rename, as an editor would: a new inode.
func replace(t *testing.T, p string, content []byte) {
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, content, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
}

var lastLen = int64(len(line(2)))

// damages is the list both the open and the closed tests run. The log holds
// line(0), line(1), line(2), the last appended alone.
var damages = []damage{
	{"flip one byte", func(t *testing.T, p string) { writeAt(t, p, []byte("X"), 3) }, "content does not match"},
	{"flip a byte of the last line", func(t *testing.T, p string) {
		st, _ := os.Stat(p)
		writeAt(t, p, []byte("9"), st.Size()-lastLen+8)
	}, "content does not match"},
	{"cut the last line", func(t *testing.T, p string) { truncate(t, p, lastLen) }, "does not match seal"},
	{"cut part of the last line", func(t *testing.T, p string) { truncate(t, p, 5) }, "does not match seal"},
	{"append a valid line", func(t *testing.T, p string) {
		st, _ := os.Stat(p)
		writeAt(t, p, line(9), st.Size())
	}, "does not match seal"},
	{"append a partial line", func(t *testing.T, p string) {
		st, _ := os.Stat(p)
		writeAt(t, p, []byte(`{"a":`), st.Size())
	}, "does not match seal"},
	{"replace with other content", func(t *testing.T, p string) {
		b, _ := os.ReadFile(p)
		replace(t, p, []byte(strings.Replace(string(b), "hello 1", "hello X", 1)))
	}, "content does not match"},
	{"remove", func(t *testing.T, p string) { os.Remove(p) }, "missing"},
}

// threeLines is a log as a running server holds it: line(0) and line(1)
// sealed by a checkpoint (the log was closed and opened again), line(2)
// durable in the journal only.
func threeLines(t *testing.T) (*Log, string, string) {
	l, p, s := mustCreate(t)
	mustAppend(t, l, append(line(0), line(1)...))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := Open(at(t, p, s))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	mustAppend(t, l, line(2))
	return l, p, s
}

// TestDamageWhileOpen: each damage makes Check and Append fail with EIO,
// Append writes nothing, and the Log stays unprovable even once the file
// is put back. The next Open reports the damage too.
func TestDamageWhileOpen(t *testing.T) {
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			l, p, s := threeLines(t)
			good := readFile(t, p)
			if err := l.Check(); err != nil {
				t.Fatal(err)
			}
			d.do(t, p)
			testkit.WantErrno(t, "Check", l.Check(), syscall.EIO, d.words)
			before := snap(t, p, s)
			_, err := l.Append(line(3))
			testkit.WantErrno(t, "Append", err, syscall.EIO, d.words)
			if !snap(t, p, s).same(before) {
				t.Fatal("append to an unprovable log wrote something")
			}
			replace(t, p, good)
			testkit.WantErrno(t, "Check", l.Check(), syscall.EIO, d.words) // sticky
			d.do(t, p)
			l.Close()
			if ps := Verify(at(t, p, s)); len(ps) == 0 || ps[0].Repairable {
				t.Fatalf("verify after close: %q", whats(ps))
			}
		})
	}
}

// TestBenignChangesStayProvable: a touch, or replacing the file with an
// identical copy, changes the stat but not the history. The Log re-verifies,
// stays provable, and appends to the file now at the path.
func TestBenignChangesStayProvable(t *testing.T) {
	l, p, s := threeLines(t)
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(p, later, later); err != nil {
		t.Fatal(err)
	}
	if err := l.Check(); err != nil {
		t.Fatalf("after touch: %v", err)
	}
	replace(t, p, readFile(t, p))
	if err := l.Check(); err != nil {
		t.Fatalf("after identical replace: %v", err)
	}
	mustAppend(t, l, line(3))
	if got := readFile(t, p); !strings.HasSuffix(string(got), string(line(3))) {
		t.Fatal("append went to the old inode")
	}
	l.Close()
	if ps := Verify(at(t, p, s)); len(ps) != 0 {
		t.Fatalf("verify: %s", whats(ps))
	}
}

// TestDamageWhileClosed: damage done while no Log is open is found by Open
// (which still returns a Log, refusing appends), Verify and Repair.
func TestDamageWhileClosed(t *testing.T) {
	all := append([]damage{}, damages...)
	all = append(all,
		damage{"seal missing", nil, "seal is missing"},
		damage{"both slots corrupted", nil, "seal has no valid record"},
		damage{"seal truncated", nil, "seal has no valid record"},
		damage{"seal slot zeroed", nil, "seal has no valid record"},
	)
	for _, d := range all {
		t.Run(d.name, func(t *testing.T) {
			l, p, s := threeLines(t)
			l.Close()
			switch d.name {
			case "seal missing":
				os.Remove(s)
			case "both slots corrupted":
				writeAt(t, s, []byte{1}, 40)
				writeAt(t, s, []byte{1}, slotSize+40)
			case "seal truncated":
				os.Truncate(s, slotSize-1)
			case "seal slot zeroed":
				os.WriteFile(s, make([]byte, sealSize), 0o600)
			default:
				d.do(t, p)
			}
			before := snap(t, p, s)
			l2, err := Open(at(t, p, s))
			if err != nil {
				t.Fatalf("open of an unprovable log: %v", err)
			}
			defer l2.Close()
			testkit.WantErrno(t, "Check", l2.Check(), syscall.EIO, d.words)
			_, err = l2.Append(line(3))
			testkit.WantErrno(t, "Append", err, syscall.EIO, d.words)
			if len(readAll(t, l2)) != len(before.log) {
				t.Fatal("an unprovable log cannot be read whole")
			}
			l2.Close()
			if !snap(t, p, s).same(before) {
				t.Fatal("open, append or close of an unprovable log wrote something")
			}
			ps := Verify(at(t, p, s))
			if len(ps) == 0 || ps[0].Repairable || !strings.Contains(ps[0].What, d.words) {
				t.Fatalf("verify: %q", whats(ps))
			}
			if _, err := Repair(at(t, p, s)); err == nil {
				t.Fatal("repair of damaged history succeeded")
			} else {
				testkit.WantErrno(t, "Repair", err, syscall.EIO, d.words)
			}
			if !snap(t, p, s).same(before) {
				t.Fatal("verify or repair changed something")
			}
		})
	}
}

// TestOneSlotLost: losing the older slot of a closed log loses nothing:
// the newer record vouches for the whole content. (Losing the newer one is
// what a crash during a checkpoint's seal write does; the journal still
// holds what it vouched for then: TestJournalCrashAtEveryInstant. On a
// closed log whose journal is gone, it is damage: the last case here.)
func TestOneSlotLost(t *testing.T) {
	for _, newest := range []bool{false, true} {
		l, p, s := threeLines(t)
		l.Close()
		st, _ := readSealFile(t, s)
		slot := (st.latest.seq + 1) % 2
		if newest {
			slot = st.latest.seq % 2
		}
		writeAt(t, s, []byte{0xff}, int64(slot*slotSize+30))
		ps := Verify(at(t, p, s))
		if newest {
			if len(ps) != 1 || ps[0].Repairable || !strings.Contains(ps[0].What, "does not match seal") {
				t.Fatalf("the newest slot lost: %s", whats(ps))
			}
			continue
		}
		if len(ps) != 0 {
			t.Fatalf("slot %d: %s", slot, whats(ps))
		}
		l2, err := Open(at(t, p, s))
		if err != nil || l2.Check() != nil {
			t.Fatalf("slot %d: open %v check %v", slot, err, l2.Check())
		}
		mustAppend(t, l2, line(3))
		l2.Close()
		if ps := Verify(at(t, p, s)); len(ps) != 0 {
			t.Fatalf("slot %d after append: %s", slot, whats(ps))
		}
	}
}

// TestMalformedUnderValidSeal: a seal that vouches for malformed content
// (forged, or written by a buggy store) does not make the log provable;
// Verify names the line.
func TestMalformedUnderValidSeal(t *testing.T) {
	for _, c := range []struct{ content, words string }{
		{string(line(0)) + "[1]\n" + string(line(2)), "line 2 is not a JSON object"},
		{string(line(0)) + `{"a":1}`, "last line has no trailing newline"},
		{string(line(0)) + "{\"a\":\"\xfe\"}\n", "line 2 is not valid UTF-8"},
	} {
		dir := t.TempDir()
		p, s := filepath.Join(dir, "events.jsonl"), filepath.Join(dir, "events.seal")
		os.WriteFile(p, []byte(c.content), 0o600)
		forgeSeal(t, s, []byte(c.content))
		ps := Verify(at(t, p, s))
		if len(ps) != 1 || ps[0].What != c.words {
			t.Fatalf("verify %q: %s", c.content, whats(ps))
		}
		l, err := Open(at(t, p, s))
		if err != nil {
			t.Fatal(err)
		}
		testkit.WantErrno(t, "Check", l.Check(), syscall.EIO, c.words)
		l.Close()
	}
}

// forgeSeal writes a seal with one committed record vouching for content.
func forgeSeal(t *testing.T, s string, content []byte) {
	h := newHash()
	h.Write(content)
	r := newRecord(1, int64(len(content)), true, h, testBind)
	f, err := os.Create(s)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Truncate(sealSize)
	if err := writeRecord(f, r, testKey); err != nil {
		t.Fatal(err)
	}
}

// TestCheckIsCheap: our own appends never make Check re-read the file; a
// touch costs one re-read, after which the new stamp is trusted again.
func TestCheckIsCheap(t *testing.T) {
	l, p, _ := threeLines(t)
	for i := range 20 {
		mustAppend(t, l, line(10+i))
		if err := l.Check(); err != nil {
			t.Fatal(err)
		}
	}
	if n := l.verifies.Load(); n != 0 {
		t.Fatalf("%d full re-reads after our own appends", n)
	}
	now := time.Now()
	os.Chtimes(p, now, now)
	for range 3 {
		if err := l.Check(); err != nil {
			t.Fatal(err)
		}
	}
	if n := l.verifies.Load(); n != 1 {
		t.Fatalf("%d full re-reads after one touch, want 1", n)
	}
}

// TestSealGoneWhileOpen: a seal deleted or replaced while the log is open
// would prove nothing after a restart, so nothing more is acknowledged.
func TestSealGoneWhileOpen(t *testing.T) {
	for _, c := range []struct {
		name  string
		do    func(t *testing.T, s string)
		words string
	}{
		{"deleted", func(t *testing.T, s string) { os.Remove(s) }, "seal is missing"},
		{"replaced by a copy", func(t *testing.T, s string) {
			b, _ := os.ReadFile(s)
			replace(t, s, b)
		}, "seal was replaced"},
		{"replaced by a symlink", func(t *testing.T, s string) {
			os.Rename(s, s+".real")
			os.Symlink(s+".real", s)
		}, "seal: a symlink"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, p, s := threeLines(t)
			c.do(t, s)
			before := snap(t, p, s)
			_, err := l.Append(line(3))
			testkit.WantErrno(t, "Append", err, syscall.EIO, c.words)
			if !snap(t, p, s).same(before) {
				t.Fatal("a refused append wrote something")
			}
		})
	}
}

// TestBoundToItsPlace: a log and seal that verify on their own are
// refused where they do not belong: under another session's binding, or
// in place of the other log of the same session.
func TestBoundToItsPlace(t *testing.T) {
	l, p, s := threeLines(t)
	l.Close()
	elsewhere := at(t, p, s)
	elsewhere.Bind = Binding([]byte("another session"), "messages.jsonl")
	otherFile := at(t, p, s)
	otherFile.Bind = Binding([]byte("test session"), "events.jsonl")
	for name, place := range map[string]Place{"another session": elsewhere, "the other log": otherFile} {
		before := snap(t, p, s)
		ps := Verify(place)
		if len(ps) != 1 || !strings.Contains(ps[0].What, "bound to another session or file") || ps[0].Repairable {
			t.Fatalf("%s: verify %s", name, whats(ps))
		}
		l, err := Open(place)
		if err != nil {
			t.Fatal(err)
		}
		testkit.WantErrno(t, "Check", l.Check(), syscall.EIO, "bound to another session or file")
		_, err = l.Append(line(4))
		testkit.WantErrno(t, "Append", err, syscall.EIO, "bound to another session")
		l.Close()
		if !snap(t, p, s).same(before) {
			t.Fatalf("%s: refusing wrote something", name)
		}
	}
	if ps := Verify(at(t, p, s)); len(ps) != 0 {
		t.Fatalf("in its own place: %s", whats(ps))
	}
}

// TestSymlinkedLogIsUnprovable: a log or seal replaced by a symlink is
// never followed; the log is unprovable.
func TestSymlinkedLogIsUnprovable(t *testing.T) {
	for _, which := range []string{"log", "seal"} {
		l, p, s := threeLines(t)
		l.Close()
		target := p
		if which == "seal" {
			target = s
		}
		os.Rename(target, target+".real")
		os.Symlink(target+".real", target)
		l2, err := Open(at(t, p, s))
		if err != nil {
			t.Fatal(err)
		}
		testkit.WantErrno(t, "Check", l2.Check(), syscall.EIO, "symlink")
		if ps := Verify(at(t, p, s)); len(ps) == 0 || !strings.Contains(whats(ps), "symlink") {
			t.Fatalf("%s: verify %s", which, whats(ps))
		}
		l2.Close()
	}
}
