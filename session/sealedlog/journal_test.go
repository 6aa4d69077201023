package sealedlog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/storefs"
)

// jstore is a store with a journal and logs at s<i>/log, each with its
// own binding, as the engine lays them out.
type jstore struct {
	t    testing.TB
	dir  string
	root *storefs.Root
	j    *Journal
	logs []*Log
	want [][]byte // what each log must hold once its appends are durable
}

const jdir = "j"

func newJStore(t testing.TB, n int, cfg JournalConfig) *jstore {
	t.Helper()
	js := newJStoreAt(t, t.TempDir())
	if err := js.root.Mkdir(jdir, 0o700); err != nil {
		t.Fatal(err)
	}
	r := js.root
	js.want = make([][]byte, n)
	for i := 0; i < n; i++ {
		if err := r.Mkdir(fmt.Sprintf("s%d", i), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	js.open(cfg)
	for i := 0; i < n; i++ {
		l, err := Create(js.place(i), anyOwner)
		if err != nil {
			t.Fatal(err)
		}
		js.logs = append(js.logs, l)
	}
	return js
}

// newJStoreAt is a jstore over the store at dir, with no journal started
// and no log open.
func newJStoreAt(t testing.TB, dir string) *jstore {
	t.Helper()
	r, err := storefs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return &jstore{t: t, dir: dir, root: r}
}

// open starts the journal (replaying what is there) and reopens the logs.
func (js *jstore) open(cfg JournalConfig) {
	js.t.Helper()
	j, err := OpenJournal(js.root, jdir, js.locate, cfg)
	if err != nil {
		js.t.Fatal(err)
	}
	js.j = j
	js.t.Cleanup(func() { j.Close() })
	for i := range js.logs {
		l, err := Open(js.place(i))
		if err != nil {
			js.t.Fatal(err)
		}
		js.logs[i] = l
	}
}

func (js *jstore) place(i int) Place {
	return Place{Root: js.root, Log: fmt.Sprintf("s%d/log", i), Seal: fmt.Sprintf("s%d/seal", i), Bind: Binding([]byte{byte(i)}, "log"), Key: testKey, Journal: js.j}
}

// placeNoJournal is log i's place for verifying it alone.
func (js *jstore) placeNoJournal(i int) Place {
	at := js.place(i)
	at.Journal = nil
	return at
}

func (js *jstore) locate(rel string) (Place, error) {
	var i int
	if _, err := fmt.Sscanf(rel, "s%d/log", &i); err != nil {
		return Place{}, err
	}
	if _, err := js.root.Lstat(path.Dir(rel)); err != nil {
		return Place{}, err
	}
	return js.place(i), nil
}

// appendDurable appends one line to log i and records it as owed.
func (js *jstore) appendDurable(i, n int) {
	js.t.Helper()
	b := line(n)
	if _, err := js.logs[i].Append(b); err != nil {
		js.t.Fatal(err)
	}
	js.want[i] = append(js.want[i], b...)
}

// crash stops the journal as kill -9 would: nothing checkpointed, no log
// sealed, no file removed; the descriptors just go.
func (js *jstore) crash() {
	j := js.j
	j.stop(false)
	j.f.Close()
	for _, l := range js.logs {
		l.f.Close()
		if l.seal != nil {
			l.seal.Close()
		}
	}
}

// verify checks every log against its seal from scratch and its content.
func (js *jstore) verify() {
	js.t.Helper()
	for i := range js.logs {
		at := js.place(i)
		at.Journal = nil
		if ps := Verify(at); len(ps) > 0 {
			js.t.Fatalf("log %d: %s", i, whats(ps))
		}
		if got := readFile(js.t, filepath.Join(js.dir, at.Log)); !bytes.Equal(got, js.want[i]) {
			js.t.Fatalf("log %d holds %d bytes, want %d", i, len(got), len(js.want[i]))
		}
	}
}

func (js *jstore) journalFiles() []string {
	gens, err := journalGens(js.root, jdir)
	if err != nil {
		js.t.Fatal(err)
	}
	var out []string
	for _, g := range gens {
		out = append(out, filepath.Join(js.dir, jdir, journalName(g)))
	}
	return out
}

// storeBytes is every file of the store, to prove nothing was written.
func (js *jstore) storeBytes() map[string]string {
	out := map[string]string{}
	filepath.Walk(js.dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			out[p] = string(b)
		}
		return nil
	})
	return out
}

// Concurrent durable appends to several logs share the journal's syncs,
// and a clean close leaves every log sealed and no journal behind.
func TestJournalGroupCommit(t *testing.T) {
	js := newJStore(t, 4, JournalConfig{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 20; k++ {
				b := line(g*100 + k)
				i := (g + k) % 4
				mu.Lock() // the order of js.want must be the order of the log
				if err := js.logs[i].Write(b); err != nil {
					t.Error(err)
				}
				js.want[i] = append(js.want[i], b...)
				mu.Unlock()
				if err := js.logs[i].Sync(); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	st := js.j.Stats()
	if st.Syncs >= st.Units/4 || st.Units != 640+4 { // 4 intents

		t.Errorf("%d units took %d syncs: no group commit", st.Units, st.Syncs)
	}
	t.Logf("%d units, %d batches, %d syncs", st.Units, st.Batches, st.Syncs)
	for _, l := range js.logs {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := js.j.Close(); err != nil {
		t.Fatal(err)
	}
	js.verify()
	if f := js.journalFiles(); len(f) != 0 {
		t.Fatalf("a clean close left %v", f)
	}
}

// Readers see appends at once, before they land in the log file.
func TestJournalReadsFromMemory(t *testing.T) {
	js := newJStore(t, 1, JournalConfig{})
	l := js.logs[0]
	js.appendDurable(0, 1)
	b := line(2)
	if err := l.Write(b); err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte(nil), js.want[0]...), b...)
	if got := readAll(t, l); !bytes.Equal(got, want) {
		t.Fatalf("read %q, want %q", got, want)
	}
	for off := int64(0); off < int64(len(want)); off += 7 { // reads across the landed edge
		p := make([]byte, 13)
		n, _ := l.ReadAt(p, off)
		if !bytes.Equal(p[:n], want[off:min(off+13, int64(len(want)))]) {
			t.Fatalf("ReadAt(%d) = %q", off, p[:n])
		}
	}
}

// After a crash, every durable append is in its log exactly once and every
// seal verifies, whether or not the landed bytes reached the disk.
func TestJournalReplayAfterCrash(t *testing.T) {
	js := newJStore(t, 3, JournalConfig{CheckpointEvery: -1})
	for n := 0; n < 30; n++ {
		js.appendDurable(n%3, n)
	}
	js.crash()
	// A power loss may keep none of the landed bytes of a log: cut one back
	// to its seal; keep another; tear a third one in the middle of a line.
	os.Truncate(filepath.Join(js.dir, "s0/log"), 0)
	os.Truncate(filepath.Join(js.dir, "s2/log"), int64(len(js.want[2])-5))
	// And a write that returned but was never synced may be cut, whole or torn.
	f, _ := os.OpenFile(filepath.Join(js.dir, "s1/log"), os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte(`{"role":"user","content":"never synced"}` + "\n" + `{"role":"us`))
	f.Close()
	rec, err := RecoverJournal(js.root, jdir, js.locate, false)
	if err != nil || len(rec.Problems) > 0 {
		t.Fatalf("recover: %v %s", err, whats(rec.Problems))
	}
	if rec.Logs != 3 || rec.Batches < 1 {
		t.Errorf("recovered %d logs from %d batches", rec.Logs, rec.Batches)
	}
	js.verify()
	if f := js.journalFiles(); len(f) != 0 {
		t.Fatalf("recovery left %v", f)
	}
}

// A torn last batch was never acknowledged: it is not a problem.
func TestJournalTornTail(t *testing.T) {
	js := newJStore(t, 1, JournalConfig{CheckpointEvery: -1})
	for n := 0; n < 5; n++ {
		js.appendDurable(0, n)
	}
	last := line(99)
	js.logs[0].Append(last)
	js.crash()
	f := js.journalFiles()[0]
	// The batch was written into the zeros reserved ahead: torn, its
	// body ends in them.
	at := lastBatch(t, f)
	tear, err := os.OpenFile(f, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	tear.WriteAt(make([]byte, journalAlign-batchHeaderLen-10), at+batchHeaderLen+10)
	tear.Close()
	os.Truncate(filepath.Join(js.dir, "s0/log"), 0)
	rec, err := RecoverJournal(js.root, jdir, js.locate, false)
	if err != nil || len(rec.Problems) > 0 {
		t.Fatalf("recover: %v %s", err, whats(rec.Problems))
	}
	js.verify()
}

// lastBatch is where the last batch of a journal file starts: the file
// goes on with the zeros reserved ahead.
func lastBatch(t *testing.T, name string) int64 {
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	last := int64(-1)
	for pos := int64(0); ; {
		h, ok := headerAt(f, pos, fi.Size())
		if !ok {
			break
		}
		last, pos = pos, pos+batchSize(h.body)
	}
	if last < 0 {
		t.Fatalf("%s holds no batch", name)
	}
	return last
}

// A damaged batch with good ones after it is damage: the start refuses it
// and changes nothing; repair replays what can be proven and says what not.
func TestJournalDamagedBatch(t *testing.T) {
	js := newJStore(t, 2, JournalConfig{CheckpointEvery: -1})
	for n := 0; n < 6; n++ {
		js.appendDurable(n%2, n)
	}
	js.crash()
	f := js.journalFiles()[0]
	b := readFile(t, f)
	b[journalAlign+batchHeaderLen+20] ^= 0x40 // batch 1 of 6: log 1's first line
	if err := os.WriteFile(f, b, 0o600); err != nil {
		t.Fatal(err)
	}
	before := js.storeBytes()
	_, err := OpenJournal(js.root, jdir, js.locate, JournalConfig{})
	var dmg *JournalDamage
	if !errors.As(err, &dmg) || len(dmg.Problems) == 0 {
		t.Fatalf("damaged journal opened: %v", err)
	}
	t.Logf("refused: %v", err)
	if after := js.storeBytes(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatal("a refused start changed the store")
	}
	rec, err := RecoverJournal(js.root, jdir, js.locate, true)
	if err != nil || len(rec.Repaired) < 2 { // the batch, and log 1's gap
		t.Fatalf("repair: %v, %s", err, whats(rec.Repaired))
	}
	t.Logf("repaired:\n%s", whats(rec.Repaired))
	// Each log is whole, or named as what the damage took (and left as it
	// was: nothing is cut); one of the two is untouched.
	clean := 0
	for i := range js.logs {
		at := js.place(i)
		at.Journal = nil
		if len(Verify(at)) == 0 {
			clean++
		} else if !strings.Contains(whats(rec.Repaired), "s"+fmt.Sprint(i)+"/log") && !strings.Contains(fmt.Sprint(rec.Repaired), at.Log) {
			t.Errorf("log %d is unprovable and not named: %s", i, whats(rec.Repaired))
		}
	}
	if clean != 1 {
		t.Errorf("%d logs verify after the repair, want 1", clean)
	}
	if f := js.journalFiles(); len(f) != 0 {
		t.Fatalf("repair left %v", f)
	}
}

// A closed log is retired in the journal, so it may move before the
// journal is checkpointed, and replay does not look for it.
func TestJournalRetiredLogMayMove(t *testing.T) {
	js := newJStore(t, 2, JournalConfig{CheckpointEvery: -1})
	js.appendDurable(0, 1)
	js.appendDurable(1, 2)
	if err := js.logs[0].Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(js.dir, "s0"), filepath.Join(js.dir, "moved")); err != nil {
		t.Fatal(err)
	}
	js.logs = js.logs[1:]
	js.want = js.want[1:]
	js.crash()
	rec, err := RecoverJournal(js.root, jdir, js.locate, false)
	if err != nil || len(rec.Problems) > 0 {
		t.Fatalf("recover: %v %s", err, whats(rec.Problems))
	}
	if rec.Logs != 1 {
		t.Fatalf("recovered %d logs, want 1", rec.Logs)
	}
}

// A log that moved without being retired is a problem of that log: the
// journal holds appends nobody can take; they are kept aside, named, and
// the journal is replayed and removed.
func TestJournalUnretiredLogGone(t *testing.T) {
	js := newJStore(t, 1, JournalConfig{CheckpointEvery: -1})
	js.appendDurable(0, 1)
	js.crash()
	os.Rename(filepath.Join(js.dir, "s0"), filepath.Join(js.dir, "moved"))
	rec, err := RecoverJournal(js.root, jdir, js.locate, false)
	if err != nil || len(rec.Problems) != 0 || len(rec.Held) != 1 || !strings.Contains(rec.Held[0].What, "1 appends are kept in") {
		t.Fatalf("recover: %v, problems %s, held %s", err, whats(rec.Problems), whats(rec.Held))
	}
	if f := js.journalFiles(); len(f) != 0 || len(heldFiles(t, js)) != 2 {
		t.Fatalf("journal files %v, kept %v", f, heldFiles(t, js))
	}
}

// Small journal files rotate; the checkpointer seals the logs and removes
// the old files; what is left replays.
func TestJournalCheckpoints(t *testing.T) {
	js := newJStore(t, 3, JournalConfig{RotateAt: 3 * journalAlign, CheckpointEvery: -1})
	for n := 0; n < 60; n++ {
		js.appendDurable(n%3, n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for js.j.Stats().Checkpoints < 5 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if c := js.j.Stats().Checkpoints; c < 5 {
		t.Fatalf("%d checkpoints", c)
	}
	for len(js.journalFiles()) > 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // the checkpointer catches up
	}
	if f := js.journalFiles(); len(f) > 2 {
		t.Fatalf("%d journal files left", len(f))
	}
	js.crash()
	rec, err := RecoverJournal(js.root, jdir, js.locate, false)
	if err != nil || len(rec.Problems) > 0 {
		t.Fatalf("recover: %v %s", err, whats(rec.Problems))
	}
	js.verify()
}

// Value files changed through the journal get their last value back at
// replay, whatever their names held after the crash.
func TestJournalValues(t *testing.T) {
	js := newJStore(t, 1, JournalConfig{CheckpointEvery: -1})
	own := storefs.Owner{Uid: -1, Gid: -1, DirMode: 0o700, FileMode: 0o640}
	cur, gone := "s0/current", "s0/by-cwd"
	for _, v := range []string{"a\n", "b\n", "c\n"} {
		if err := js.j.PutValue(cur, []byte(v), own); err != nil {
			t.Fatal(err)
		}
	}
	if err := js.j.PutValue(gone, []byte("x\n"), own); err != nil {
		t.Fatal(err)
	}
	if err := js.j.RemoveValue(gone); err != nil {
		t.Fatal(err)
	}
	js.appendDurable(0, 1) // waits for everything queued before it
	js.crash()
	// A power loss may keep an older name or none.
	os.WriteFile(filepath.Join(js.dir, cur), []byte("a\n"), 0o600)
	os.WriteFile(filepath.Join(js.dir, gone), []byte("x\n"), 0o600)
	rec, err := RecoverJournal(js.root, jdir, js.locate, false)
	if err != nil || len(rec.Problems) > 0 {
		t.Fatalf("recover: %v %s", err, whats(rec.Problems))
	}
	if got := readFile(t, filepath.Join(js.dir, cur)); string(got) != "c\n" {
		t.Fatalf("current holds %q after replay", got)
	}
	if fi, err := os.Stat(filepath.Join(js.dir, cur)); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("current: %v %v", fi.Mode(), err)
	}
	if _, err := os.Stat(filepath.Join(js.dir, gone)); !os.IsNotExist(err) {
		t.Fatalf("a removed value came back: %v", err)
	}
	js.verify()
}

// Files rotate while appenders queue units: what was queued when a file
// was left goes into the next one, whose room is written ahead without
// touching a batch; after a crash everything acknowledged replays.
func TestJournalRotatesUnderLoad(t *testing.T) {
	const logs, each = 4, 40
	js := newJStore(t, logs, JournalConfig{RotateAt: 2 * journalAlign, CheckpointEvery: -1})
	var wg sync.WaitGroup
	for i := 0; i < logs; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < each; n++ {
				js.appendDurable(i, i*each+n)
			}
		}()
	}
	wg.Wait()
	js.crash()
	rec, err := RecoverJournal(js.root, jdir, js.locate, false)
	if err != nil || len(rec.Problems) > 0 {
		t.Fatalf("recover: %v %s", err, whats(rec.Problems))
	}
	js.verify()
}

// heldAppend starts a durable append of line n to log i (its intent
// durable) whose write at the log's end waits until release is called,
// and returns once that write waits; done has the append's result. The
// line is owed once released.
func (js *jstore) heldAppend(i, n int) (done <-chan error, release func()) {
	in, out, res := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	var once sync.Once
	js.logs[i].writeData = func(f *os.File, b []byte, off int64) (int, error) {
		once.Do(func() { close(in); <-out })
		return f.WriteAt(b, off)
	}
	go func() { _, err := js.logs[i].Append(line(n)); res <- err }()
	<-in
	js.want[i] = append(js.want[i], line(n)...)
	return res, func() { close(out) }
}

// appendsMeanwhile appends lines from to below to to log i durably in the
// background; the channel closes when they are done.
func (js *jstore) appendsMeanwhile(i, from, to int) <-chan struct{} {
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for n := from; n < to; n++ {
			js.appendDurable(i, n)
		}
	}()
	return finished
}

// crashAndVerify crashes the journal, replays it and verifies every log.
func (js *jstore) crashAndVerify() {
	js.t.Helper()
	js.crash()
	if rec, err := RecoverJournal(js.root, jdir, js.locate, false); err != nil || len(rec.Problems) > 0 {
		js.t.Fatalf("recover: %v %s", err, whats(rec.Problems))
	}
	js.verify()
}

// A write at one log's end holds up no other log's appends: the journal's
// lock is not held while a log is written (on a distributed filesystem
// each write is a round trip through its client).
func TestJournalAppendsWriteAtOnce(t *testing.T) {
	js := newJStore(t, 2, JournalConfig{})
	js.appendDurable(0, 0) // its intent is durable: the next append writes at once
	done, release := js.heldAppend(0, 1)
	select {
	case <-js.appendsMeanwhile(1, 2, 12):
	case <-time.After(10 * time.Second):
		release()
		t.Fatal("appends to log 1 waited for a write to log 0")
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	js.crashAndVerify()
}

// A new generation waits for the writes in flight: every byte written to
// a log before the journal moves to its next file has its record queued
// first (the old file's checkpoint covers it), and no write starts while
// the file changes (the log's next append asks for an intent in the new
// one).
func TestJournalRotationWaitsForWrites(t *testing.T) {
	js := newJStore(t, 2, JournalConfig{RotateAt: 2 * journalAlign, CheckpointEvery: -1})
	js.appendDurable(0, 0)
	done, release := js.heldAppend(0, 1)
	finished := js.appendsMeanwhile(1, 2, 40)
	rotating := func() bool {
		js.j.mu.Lock()
		defer js.j.mu.Unlock()
		return js.j.rotating
	}
	deadline := time.Now().Add(10 * time.Second)
	for !rotating() && len(js.journalFiles()) == 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	files, held := js.journalFiles(), rotating()
	release()
	<-finished
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !held || len(files) != 1 {
		t.Fatalf("with a write in flight: rotation held back %v, journal files %v; want held, one file", held, files)
	}
	if len(js.journalFiles()) < 2 && js.j.Stats().Checkpoints == 0 {
		t.Fatalf("no rotation after the write: %v", js.journalFiles())
	}
	js.crashAndVerify()
}
