package sealedlog

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/storefs"
)

// paths returns a fresh log and seal path in their own temp directory.
func paths(t testing.TB) (string, string) {
	dir := t.TempDir()
	return filepath.Join(dir, "messages.jsonl"), filepath.Join(dir, "messages.seal")
}

// anyOwner leaves new files to the test's own uid.
var anyOwner = storefs.Owner{Uid: -1, Gid: -1, DirMode: 0o700, FileMode: 0o600}

// testBind is the binding of every log the tests make.
var testBind = Binding([]byte("test session"), "messages.jsonl")

// testKey is the seal key of every store the tests make.
var testKey = NewKey(bytes.Repeat([]byte{7}, keySize))

// encodeUnkeyed lays r out as a ctxfs before keyed seals wrote it
// (CTXSEAL2): the same fields, no MAC, the CRC over the slot.
func encodeUnkeyed(r *record) []byte {
	b := r.layout(unkeyedMagic)
	binary.LittleEndian.PutUint32(b[crcOffset:], crc32.Checksum(b[:crcOffset], castagnoli))
	return b
}

// at is the Place of a log and seal given by host paths in one directory:
// a store rooted at that directory, closed when the test ends, whose logs
// append through the directory's journal (journalIn), as the engine's do.
func at(t testing.TB, p, s string) Place {
	t.Helper()
	r, err := storefs.Open(filepath.Dir(p))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return Place{Root: r, Log: filepath.Base(p), Seal: filepath.Base(s), Bind: testBind, Key: testKey, Journal: journalIn(t, filepath.Dir(p), JournalConfig{}).j}
}

// testJournal is the write-ahead journal of a test's directory, in its
// subdirectory testJournalDir.
type testJournal struct {
	j    *Journal
	root *storefs.Root
}

const testJournalDir = ".journal"

// journals holds the journal of each test directory: every Place of a
// directory shares it (subtests too: a second journal in the directory
// would replay the first one's files), so that its logs can be appended
// as a pair and reopened, as a store's do.
var journals sync.Map // directory -> *testJournal

// journalIn is the journal of dir for this test, started (with cfg) the
// first time it is asked for and closed when the test ends. Its records
// name the logs of dir; a log <name>.jsonl has its seal at <name>.seal.
func journalIn(t testing.TB, dir string, cfg JournalConfig) *testJournal {
	t.Helper()
	key := dir
	if tj, ok := journals.Load(key); ok {
		return tj.(*testJournal)
	}
	r, err := storefs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Mkdir(testJournalDir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		t.Fatal(err)
	}
	tj := &testJournal{root: r}
	if tj.j, err = OpenJournal(r, testJournalDir, tj.locate, cfg); err != nil {
		t.Fatal(err)
	}
	journals.Store(key, tj)
	t.Cleanup(func() {
		journals.Delete(key)
		tj.j.Close()
		r.Close()
	})
	return tj
}

func (tj *testJournal) locate(rel string) (Place, error) {
	return Place{Root: tj.root, Log: rel, Seal: strings.TrimSuffix(rel, ".jsonl") + ".seal", Bind: testBind, Key: testKey, Journal: tj.j}, nil
}

// verifyWithJournal is fsck's judgement of a log beside a running server:
// its seal plus what the journal holds for it.
func (tj *testJournal) verifyWithJournal(t testing.TB, at Place) []Problem {
	t.Helper()
	plan, err := PlanJournal(tj.root, testJournalDir, tj.locate, false)
	if err != nil {
		t.Fatal(err)
	}
	return plan.Verify(at)
}

// settle waits until the checkpointer has checkpointed every file the
// committer left, so that nothing writes a seal behind the test's back.
func (j *Journal) settle(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		// A rotation due is made by the committer after the append that
		// filled the file returned: its checkpoint is still to come.
		j.mu.Lock()
		done := j.live >= j.gen && !j.rotateDue() && !j.committing
		j.mu.Unlock()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the checkpointer did not catch up")
		}
		time.Sleep(time.Millisecond)
	}
}

func mustCreate(t testing.TB) (*Log, string, string) {
	t.Helper()
	p, s := paths(t)
	l, err := Create(at(t, p, s), anyOwner)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, p, s
}

func line(i int) []byte {
	return []byte(fmt.Sprintf(`{"role":"user","n":%d,"content":"hello %d"}`+"\n", i, i))
}

func mustAppend(t testing.TB, l *Log, data []byte) int64 {
	t.Helper()
	off, err := l.Append(data)
	if err != nil {
		t.Fatalf("append %q: %v", data, err)
	}
	return off
}

func readFile(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return b
}

// files is a snapshot of both files, to prove that nothing was written.
type files struct{ log, seal []byte }

func snap(t testing.TB, p, s string) files { return files{readFile(t, p), readFile(t, s)} }

func (f files) same(g files) bool { return bytes.Equal(f.log, g.log) && bytes.Equal(f.seal, g.seal) }

// readAll reads a Log's committed content through ReadAt.
func readAll(t testing.TB, l *Log) []byte {
	t.Helper()
	b := make([]byte, l.Size()+10)
	n, err := l.ReadAt(b, 0)
	if n != int(l.Size()) || (err != nil && err.Error() != "EOF") {
		t.Fatalf("ReadAt: %d of %d, %v", n, l.Size(), err)
	}
	return b[:n]
}

func whats(ps []Problem) string {
	var w []string
	for _, p := range ps {
		w = append(w, fmt.Sprintf("%s: %s (repairable %v)", filepath.Base(p.Path), p.What, p.Repairable))
	}
	return strings.Join(w, "\n")
}

func newHash() hash.Hash { return sha256.New() }
