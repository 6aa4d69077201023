package sealedlog

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

func TestCreateAppendReopen(t *testing.T) {
	l, p, s := mustCreate(t)
	var want []byte
	for i := range 5 {
		off := mustAppend(t, l, line(i))
		if off != int64(len(want)) {
			t.Fatalf("append %d at %d, want %d", i, off, len(want))
		}
		want = append(want, line(i)...)
	}
	two := append(line(5), line(6)...)
	mustAppend(t, l, two)
	want = append(want, two...)
	if got := readAll(t, l); !bytes.Equal(got, want) || l.Size() != int64(len(want)) {
		t.Fatalf("read %q, want %q", got, want)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	for _, f := range []string{p, s} {
		if st, _ := os.Stat(f); st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v", f, st.Mode())
		}
	}
	if ps := Verify(at(t, p, s)); len(ps) != 0 {
		t.Fatalf("verify: %s", whats(ps))
	}
	l2, err := Open(at(t, p, s))
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if err := l2.Check(); err != nil || l2.Size() != int64(len(want)) {
		t.Fatalf("reopened: size %d, check %v", l2.Size(), err)
	}
	if off := mustAppend(t, l2, line(7)); off != int64(len(want)) {
		t.Fatalf("append after reopen at %d", off)
	}
	want = append(want, line(7)...)
	if got := readFile(t, p); !bytes.Equal(got, want) {
		t.Fatalf("file %q", got)
	}
	l2.Close()
	if ps := Verify(at(t, p, s)); len(ps) != 0 {
		t.Fatalf("verify: %s", whats(ps))
	}
}

func TestCreateExistingAndOpenMissing(t *testing.T) {
	_, p, s := mustCreate(t)
	if _, err := Create(at(t, p, s+".other"), anyOwner); err == nil {
		t.Fatal("create over an existing log")
	} else {
		testkit.WantErrno(t, "Create", err, syscall.EEXIST)
	}
	p2 := filepath.Join(filepath.Dir(p), "events.jsonl")
	if _, err := Create(at(t, p2, s), anyOwner); err == nil {
		t.Fatal("create over an existing seal")
	} else {
		testkit.WantErrno(t, "Create", err, syscall.EEXIST)
	}
	if _, err := os.Stat(p2); !os.IsNotExist(err) {
		t.Fatalf("failed create left %s behind: %v", p2, err)
	}
	// A log that is gone is history lost: it opens unprovable, reads as
	// empty, and refuses appends.
	l, err := Open(at(t, p2, s))
	if err != nil {
		t.Fatalf("open of a missing log: %v", err)
	}
	testkit.WantErrno(t, "Check", l.Check(), syscall.EIO, "log file is missing")
	_, err = l.Append(line(1))
	testkit.WantErrno(t, "Append", err, syscall.EIO, "log file is missing")
	if _, err := os.Stat(p2); !os.IsNotExist(err) {
		t.Fatalf("append to a missing log made %s", p2)
	}
}

func TestCreateChownSelf(t *testing.T) {
	p, s := paths(t)
	l, err := Create(at(t, p, s), storefs.Owner{Uid: os.Getuid(), Gid: os.Getgid(), DirMode: 0o700, FileMode: 0o600})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}

func TestReadAtBounds(t *testing.T) {
	for _, l := range []*Log{NewMemory(), func() *Log { l, _, _ := mustCreate(t); return l }()} {
		mustAppend(t, l, line(1))
		b := make([]byte, 4)
		if n, err := l.ReadAt(b, 1); n != 4 || err != nil || string(b) != `"rol` {
			t.Fatalf("ReadAt inside: %d %v %q", n, err, b)
		}
		size := l.Size()
		if n, err := l.ReadAt(b, size-2); n != 2 || err != io.EOF {
			t.Fatalf("ReadAt across the end: %d %v", n, err)
		}
		if n, err := l.ReadAt(b, size); n != 0 || err != io.EOF {
			t.Fatalf("ReadAt at the end: %d %v", n, err)
		}
	}
}

func TestMemoryLog(t *testing.T) {
	l := NewMemory()
	mustAppend(t, l, line(1))
	if off := mustAppend(t, l, line(2)); off != int64(len(line(1))) {
		t.Fatalf("offset %d", off)
	}
	_, err := l.Append([]byte("nope\n"))
	testkit.WantErrno(t, "Append", err, syscall.EINVAL, "line 1 is not a JSON object")
	if l.Check() != nil || l.Close() != nil || string(readAll(t, l)) != string(line(1))+string(line(2)) {
		t.Fatal("memory log misbehaves")
	}
}

// TestConcurrentAppends: 16 writers, each call one to three lines. Every
// call's bytes must sit contiguously at its offset, all of it durable and
// verifiable, and the journal's committer must have batched (fewer syncs
// than calls).
func TestConcurrentAppends(t *testing.T) {
	l, p, s := mustCreate(t)
	const writers, calls = 16, 40
	type placed struct {
		off  int64
		data []byte
	}
	got := make([][]placed, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for c := range calls {
				var data []byte
				for k := range 1 + c%3 {
					data = append(data, line(w*100000+c*10+k)...)
				}
				off, err := l.Append(data)
				if err != nil {
					t.Error(err)
					return
				}
				got[w] = append(got[w], placed{off, data})
			}
		})
	}
	wg.Wait()
	file := readFile(t, p)
	total := 0
	for _, ps := range got {
		for _, pl := range ps {
			total += len(pl.data)
			if !bytes.Equal(file[pl.off:pl.off+int64(len(pl.data))], pl.data) {
				t.Fatalf("call's bytes not at its offset %d", pl.off)
			}
		}
	}
	if total != len(file) || l.Size() != int64(total) {
		t.Fatalf("file %d bytes, size %d, appended %d", len(file), l.Size(), total)
	}
	for i, ln := range bytes.Split(bytes.TrimSuffix(file, []byte("\n")), []byte("\n")) {
		if !json.Valid(ln) {
			t.Fatalf("line %d interleaved: %q", i+1, ln)
		}
	}
	st := l.j.Stats()
	t.Logf("%d calls, %d units, %d syncs", writers*calls, st.Units, st.Syncs)
	if st.Syncs >= writers*calls {
		t.Fatalf("no group commit: %d syncs for %d calls", st.Syncs, writers*calls)
	}
	l.Close()
	if ps := Verify(at(t, p, s)); len(ps) != 0 {
		t.Fatalf("verify: %s", whats(ps))
	}
}

// TestInvalidWritesNothing: every refused append leaves both files
// byte-for-byte as they were, and queues nothing in the journal.
func TestInvalidWritesNothing(t *testing.T) {
	big := `{"x":"` + strings.Repeat("a", 1<<20) + `"}` + "\n"
	cases := []struct{ name, data, words string }{
		{"invalid JSON", `{"a":}` + "\n", "line 1 is not valid JSON"},
		{"not an object", `[1,2]` + "\n", "line 1 is not a JSON object"},
		{"string", `"hi"` + "\n", "not a JSON object"},
		{"invalid UTF-8", "{\"a\":\"\xff\"}\n", "line 1 is not valid UTF-8"},
		{"over 1 MiB", big, "line 1 of 1048584 bytes is over"},
		{"no trailing newline", `{"a":1}`, "whole lines"},
		{"empty", "", "whole lines"},
		{"empty line", "\n", "line 1 is not a JSON object"},
		{"two objects", `{} {}` + "\n", "line 1 is not valid JSON"},
		{"one bad among good", string(line(1)) + "oops\n" + string(line(2)), "line 2 is not a JSON object"},
	}
	l, p, s := mustCreate(t)
	mustAppend(t, l, line(0))
	before, units := snap(t, p, s), l.j.Stats().Units
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := l.Append([]byte(c.data))
			testkit.WantErrno(t, "Append", err, syscall.EINVAL, c.words)
			testkit.WantErrno(t, "Write", l.Write([]byte(c.data)), syscall.EINVAL, c.words)
			if !snap(t, p, s).same(before) || l.Size() != int64(len(line(0))) || l.j.Stats().Units != units {
				t.Fatal("a refused append wrote something")
			}
		})
	}
	if err := l.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestFailedWriteIsUndone: a short write with ENOSPC (or none) is cut back
// and queued nowhere; the seal is untouched; the log stays provable and
// usable.
func TestFailedWriteIsUndone(t *testing.T) {
	for _, fail := range []error{syscall.ENOSPC, nil} { // nil: a short write without error
		l, p, s := mustCreate(t)
		mustAppend(t, l, line(0))
		l.writeData = func(f *os.File, b []byte, off int64) (int, error) {
			n, _ := f.WriteAt(b[:len(b)/2], off)
			return n, fail
		}
		seal, units := readFile(t, s), l.j.Stats().Units
		_, err := l.Append(line(1))
		want := syscall.EIO
		if fail != nil {
			want = fail.(syscall.Errno)
		}
		testkit.WantErrno(t, "Append", err, want)
		if got := readFile(t, p); !bytes.Equal(got, line(0)) || !bytes.Equal(readFile(t, s), seal) || l.j.Stats().Units != units {
			t.Fatalf("failed append left %q, or changed the seal, or queued a record", got)
		}
		if err := l.Check(); err != nil {
			t.Fatalf("after an undone append: %v", err)
		}
		l.writeData = (*os.File).WriteAt
		mustAppend(t, l, line(2))
		l.Close()
		if ps := Verify(at(t, p, s)); len(ps) != 0 {
			t.Fatalf("verify: %s", whats(ps))
		}
	}
}

func TestAppendAfterClose(t *testing.T) {
	l, p, s := mustCreate(t)
	l.Close()
	before := snap(t, p, s)
	_, err := l.Append(line(1))
	testkit.WantErrno(t, "Append", err, syscall.EBADF, "closed")
	testkit.WantErrno(t, "Write", l.Write(line(1)), syscall.EBADF, "closed")
	if !snap(t, p, s).same(before) {
		t.Fatal("an append after close wrote something")
	}
}

// TestNoJournalNoAppend: a log made or opened without a journal (a
// session being created, a tool) has one durability protocol too: none of
// its own. It refuses appends (EBADF) and writes nothing; an unprovable
// one says why (EIO).
func TestNoJournalNoAppend(t *testing.T) {
	p, s := paths(t)
	place := at(t, p, s)
	place.Journal = nil
	l, err := Create(place, anyOwner)
	if err != nil {
		t.Fatal(err)
	}
	before := snap(t, p, s)
	_, err = l.Append(line(1))
	testkit.WantErrno(t, "Append", err, syscall.EBADF, "without a journal")
	testkit.WantErrno(t, "Write", l.Write(line(1)), syscall.EBADF, "without a journal")
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if !snap(t, p, s).same(before) {
		t.Fatal("a log without a journal was written")
	}
	os.Remove(p)
	gone, err := Open(place)
	if err != nil {
		t.Fatal(err)
	}
	_, err = gone.Append(line(1))
	testkit.WantErrno(t, "Append", err, syscall.EIO, "log file is missing")
}

// TestFailedUndoIsUnprovable: when a failed append cannot be taken back
// (here the log cannot be cut), the file may hold unacknowledged bytes,
// so the Log must refuse further appends.
func TestFailedUndoIsUnprovable(t *testing.T) {
	l, p, _ := mustCreate(t)
	mustAppend(t, l, line(0))
	l.writeData = func(f *os.File, b []byte, off int64) (int, error) {
		n, _ := f.WriteAt(b[:3], off)
		ro, err := os.Open(p) // the cut back through a read-only descriptor fails
		if err != nil {
			t.Fatal(err)
		}
		l.f = ro
		f.Close()
		return n, syscall.ENOSPC
	}
	_, err := l.Append(line(1))
	testkit.WantErrno(t, "Append", err, syscall.ENOSPC)
	testkit.WantErrno(t, "Check", l.Check(), syscall.EIO, "could not be taken back")
	before := readFile(t, p)
	_, err = l.Append(line(2))
	testkit.WantErrno(t, "Append", err, syscall.EIO, "could not be taken back")
	if !bytes.Equal(readFile(t, p), before) {
		t.Fatal("append to an unprovable log wrote something")
	}
}

// pairOf is two logs of one session, each in its own file.
func pairOf(t *testing.T) (ev, msg *Log, evP, evS, msgP, msgS string) {
	t.Helper()
	dir := t.TempDir()
	evP, evS = filepath.Join(dir, "events.jsonl"), filepath.Join(dir, "events.seal")
	msgP, msgS = filepath.Join(dir, "messages.jsonl"), filepath.Join(dir, "messages.seal")
	var err error
	if ev, err = Create(at(t, evP, evS), anyOwner); err != nil {
		t.Fatal(err)
	}
	if msg, err = Create(at(t, msgP, msgS), anyOwner); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ev.Close(); msg.Close() })
	return
}

// A pair is appended whole or not at all: a refusal of either half (an
// invalid line, a failed write) leaves both logs and seals as they were.
func TestAppendPairAllOrNothing(t *testing.T) {
	ev, msg, evP, evS, msgP, msgS := pairOf(t)
	testkit.Must(t, AppendPair(ev, line(1), msg, line(2)))
	before := []files{snap(t, evP, evS), snap(t, msgP, msgS)}
	sizes := [2]int64{ev.Size(), msg.Size()}
	// A refusal, by validation or by a failed write of either half,
	// leaves both logs and both seals as they were: the half written is
	// taken back before the unit is queued.
	unchanged := func(what string) {
		t.Helper()
		if !snap(t, evP, evS).same(before[0]) || !snap(t, msgP, msgS).same(before[1]) || ev.Size() != sizes[0] || msg.Size() != sizes[1] {
			t.Fatalf("%s: a refused pair wrote something", what)
		}
	}
	logsUnchanged := func(what string) {
		t.Helper()
		if !bytes.Equal(readFile(t, evP), before[0].log) || !bytes.Equal(readFile(t, msgP), before[1].log) || ev.Size() != sizes[0] || msg.Size() != sizes[1] {
			t.Fatalf("%s: a refused pair left bytes in a log", what)
		}
		tj := journalIn(t, filepath.Dir(evP), JournalConfig{})
		for _, p := range []Place{at(t, evP, evS), at(t, msgP, msgS)} {
			if ps := tj.verifyWithJournal(t, p); len(ps) != 0 {
				t.Fatalf("%s: verify: %s", what, whats(ps))
			}
		}
	}
	testkit.WantErrno(t, "AppendPair", AppendPair(ev, line(3), msg, []byte("not json\n")), syscall.EINVAL)
	unchanged("an invalid second half")
	testkit.WantErrno(t, "AppendPair", AppendPair(ev, []byte("[1]\n"), msg, line(3)), syscall.EINVAL)
	unchanged("an invalid first half")
	msg.writeData = func(f *os.File, b []byte, off int64) (int, error) { return 0, syscall.ENOSPC }
	testkit.WantErrno(t, "AppendPair", AppendPair(ev, line(3), msg, line(4)), syscall.ENOSPC)
	unchanged("a full disk under the second half")
	logsUnchanged("a full disk under the second half")
	msg.writeData = (*os.File).WriteAt
	ev.writeData = func(f *os.File, b []byte, off int64) (int, error) { return 0, syscall.ENOSPC }
	testkit.WantErrno(t, "AppendPair", AppendPair(ev, line(3), msg, line(4)), syscall.ENOSPC)
	unchanged("a full disk under the first half")
	logsUnchanged("a full disk under the first half")
	ev.writeData = (*os.File).WriteAt
	testkit.Must(t, AppendPair(ev, line(3), msg, line(4)))
	lone, err := Create(Place{Root: at(t, msgP, msgS).Root, Log: "lone.jsonl", Seal: "lone.seal", Bind: testBind, Key: testKey, Journal: journalIn(t, t.TempDir(), JournalConfig{}).j}, anyOwner)
	testkit.Must(t, err)
	defer lone.Close()
	testkit.WantErrno(t, "AppendPair", AppendPair(ev, line(5), lone, line(5)), syscall.EINVAL, "not in one journal")
	testkit.Must(t, ev.Close())
	testkit.Must(t, msg.Close())
	for _, p := range []Place{at(t, evP, evS), at(t, msgP, msgS)} {
		if ps := Verify(p); len(ps) != 0 {
			t.Fatalf("verify: %s", whats(ps))
		}
	}
}

// Pairs in both orders and single appends on the same logs run at once
// without deadlock, and every append lands.
func TestAppendPairConcurrent(t *testing.T) {
	ev, msg, _, _, _, _ := pairOf(t)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(3)
		go func() { defer wg.Done(); AppendPair(ev, line(i), msg, line(i)) }()
		go func() { defer wg.Done(); AppendPair(msg, line(i), ev, line(i)) }()
		go func() { defer wg.Done(); ev.Append(line(i)) }()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("pairs deadlocked")
	}
	if got, want := bytes.Count(readAll(t, ev), []byte("\n")), 24; got != want {
		t.Fatalf("events holds %d lines, want %d", got, want)
	}
}
