package sealedlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// zombieFile writes, as a writer of token would when it starts its next
// file, journal file gen holding an intent and an append of data for log
// i, and appends data to the log itself, as that writer's append does.
func (js *jstore) zombieFile(gen, token uint64, i int, data []byte) {
	js.t.Helper()
	at := js.place(i)
	logPath := filepath.Join(js.dir, at.Log)
	st, err := os.Stat(logPath)
	if err != nil {
		js.t.Fatal(err)
	}
	intent := &jrec{kind: recIntent, path: at.Log, bind: at.Bind}
	app := &jrec{kind: recAppend, path: at.Log, bind: at.Bind, off: st.Size(), data: data}
	js.journalFile(gen, token, []*jrec{intent}, []*jrec{app})
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		js.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		js.t.Fatal(err)
	}
}

// journalFile writes journal file gen, of batches of token, as a writer
// would leave it.
func (js *jstore) journalFile(gen, token uint64, batches ...[]*jrec) {
	js.t.Helper()
	var b []byte
	for n, recs := range batches {
		b = append(b, encodeBatch(nil, gen, uint64(n), token, recs)...)
	}
	testkit.Must(js.t, os.WriteFile(filepath.Join(js.dir, jdir, journalName(gen)), b, 0o600))
}

// A writer of token 5 is fenced off by a takeover of token 7 while it
// still runs (cut off, paused): what it appends afterwards, to its old
// file and in a file it makes later, is passed over by fsck's plan and
// by the replay, noted and never damage, and each log is cut back to
// exactly what it held when the fence was written.
func TestJournalFenceIgnoresAStaleWriter(t *testing.T) {
	js := newJStore(t, 2, JournalConfig{CheckpointEvery: -1, Token: 5})
	for n := 0; n < 6; n++ {
		js.appendDurable(n%2, n)
	}
	if err := FenceJournal(js.root, jdir, 7); err != nil {
		t.Fatal(err)
	}
	fenced := readFile(t, filepath.Join(js.dir, jdir, "fence"))
	if !strings.Contains(string(fenced), "epoch 7\n") {
		t.Fatalf("fence:\n%s", fenced)
	}
	// The stale writer goes on: durable appends, as far as it knows, to
	// its old file (the intents there were written before the fence) ...
	for n := 10; n < 14; n++ {
		if _, err := js.logs[n%2].Append(line(n)); err != nil {
			t.Fatal(err)
		}
	}
	// ... and a new file of its own, with an intent of its own.
	old := js.journalFiles()
	js.crash()
	js.zombieFile(js.j.gen+1, 5, 1, line(20))
	if len(js.journalFiles()) != len(old)+1 {
		t.Fatalf("journal files %v", js.journalFiles())
	}

	plan, err := PlanJournal(js.root, jdir, js.locate, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Problems) > 0 {
		t.Fatalf("plan problems: %s", whats(plan.Problems))
	}
	if len(plan.Notes) != 2 || !strings.Contains(plan.Notes[0].What, "written after its writer's lease was lost") || !strings.Contains(plan.Notes[0].What, "token [5]") {
		t.Fatalf("plan notes: %s", whats(plan.Notes))
	}
	for i := range js.logs {
		if ps := plan.Verify(js.placeNoJournal(i)); len(ps) > 0 {
			t.Fatalf("log %d against seal and journal: %s", i, whats(ps))
		}
	}

	// The new writer starts (token 7 again: its fence changes nothing of
	// what counts) and replays.
	j, err := OpenJournal(js.root, jdir, js.locate, JournalConfig{CheckpointEvery: -1, Token: 7})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	js.verify() // every log holds exactly the lines appended before the fence, sealed
	if f := js.journalFiles(); len(f) != 1 {
		t.Fatalf("journal files after replay: %v", f)
	}
	// The second fence keeps the first one's end of the old file: what the
	// stale writer added there before it never counts.
	if b := string(readFile(t, filepath.Join(js.dir, jdir, "fence"))); !strings.Contains(b, "epoch 7\nfile "+journalName(1)[len(journalPrefix):]+" 32768\n") {
		t.Fatalf("fence after the replay:\n%s", b)
	}
	// Once the files it names are gone, a later fence keeps one epoch of
	// them, naming nothing: every lower token is out everywhere.
	j.Close()
	if err := FenceJournal(js.root, jdir, 8); err != nil {
		t.Fatal(err)
	}
	if b := string(readFile(t, filepath.Join(js.dir, jdir, "fence"))); strings.Count(b, "epoch ") != 2 || !strings.Contains(b, "epoch 7\nepoch 8\ncrc32c") {
		t.Fatalf("fence pruned:\n%s", b)
	}
}

// A writer whose token is below the fence's is refused with ESTALE, and
// the fence is left as it was; a server outside the cluster (token 0)
// refuses a fenced journal the same way, replaying nothing.
func TestJournalFenceRefusesAStaleToken(t *testing.T) {
	js := newJStore(t, 1, JournalConfig{CheckpointEvery: -1, Token: 7})
	js.appendDurable(0, 1)
	js.crash()
	before := js.storeBytes()
	for _, cfg := range []JournalConfig{{Token: 6}, {Token: 0}} {
		_, err := OpenJournal(js.root, jdir, js.locate, cfg)
		if !errors.Is(err, syscall.ESTALE) {
			t.Fatalf("token %d: %v, want ESTALE", cfg.Token, err)
		}
	}
	if err := FenceJournal(js.root, jdir, 3); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("fence with token 3: %v, want ESTALE", err)
	}
	testkit.Same(t, "a refused writer", before, js.storeBytes())
}

// encodeBatchV1 lays out a batch as a ctxfs before fencing tokens wrote
// it (CTXJRNL1: a 32-byte header, no token).
func encodeBatchV1(gen, num uint64, recs []*jrec) []byte {
	var body []byte
	for _, r := range recs {
		p := []byte{r.kind, 0, 0}
		binary.LittleEndian.PutUint16(p[1:], uint16(len(r.path)))
		p = append(append(p, r.path...), r.bind[:]...)
		p = binary.LittleEndian.AppendUint64(p, uint64(r.off))
		p = binary.LittleEndian.AppendUint32(p, uint32(len(r.data)))
		body = append(append(body, p...), r.data...)
	}
	b := make([]byte, (32+len(body)+journalAlign-1)/journalAlign*journalAlign)
	copy(b, "CTXJRNL1")
	binary.LittleEndian.PutUint64(b[8:], gen)
	binary.LittleEndian.PutUint64(b[16:], num)
	binary.LittleEndian.PutUint32(b[24:], uint32(len(body)))
	copy(b[32:], body)
	crc := crc32.Update(crc32.Checksum(b[:28], castagnoli), castagnoli, body)
	binary.LittleEndian.PutUint32(b[28:], crc)
	return b
}

// A journal an older ctxfs left (CTXJRNL1 batches, no token) replays as it
// did, fenced or not: its batches are token 0's, and a fence that names
// its file where it ends lets them all count.
func TestJournalReplaysTheOldFormat(t *testing.T) {
	for _, fenced := range []bool{false, true} {
		js := newJStore(t, 1, JournalConfig{CheckpointEvery: -1})
		js.crash()
		at := js.place(0)
		var b []byte
		for n := range 3 {
			recs := []*jrec{{kind: recAppend, path: at.Log, bind: at.Bind, off: int64(len(js.want[0])), data: line(n)}}
			if n == 0 {
				recs = append([]*jrec{{kind: recIntent, path: at.Log, bind: at.Bind}}, recs...)
			}
			b = append(b, encodeBatchV1(js.j.gen+1, uint64(n), recs)...)
			js.want[0] = append(js.want[0], line(n)...)
		}
		if err := os.WriteFile(filepath.Join(js.dir, jdir, journalName(js.j.gen+1)), b, 0o600); err != nil {
			t.Fatal(err)
		}
		if fenced {
			if err := FenceJournal(js.root, jdir, 9); err != nil {
				t.Fatal(err)
			}
		}
		rec, err := RecoverJournal(js.root, jdir, js.locate, false)
		if err != nil || len(rec.Problems) > 0 || len(rec.Ignored) > 0 {
			t.Fatalf("fenced %v: %v problems %s ignored %s", fenced, err, whats(rec.Problems), whats(rec.Ignored))
		}
		if rec.Batches != 3 {
			t.Fatalf("fenced %v: %d batches replayed, want 3", fenced, rec.Batches)
		}
		js.verify()
	}
}

// The write gate closes between a batch's write and its acknowledgement:
// the waiter gets EAGAIN, later appends get EAGAIN at once, and nothing
// more is written to the journal, the logs or their seals, closing
// included.
func TestJournalGateClosesBeforeTheAck(t *testing.T) {
	var closed atomic.Bool
	gate := func() error {
		if closed.Load() {
			return syscall.EAGAIN
		}
		return nil
	}
	js := newJStore(t, 2, JournalConfig{CheckpointEvery: -1, Gate: gate})
	js.appendDurable(0, 1)
	js.appendDurable(1, 2)
	js.j.instant = func(name string) {
		if name == "batch written" {
			closed.Store(true)
		}
	}
	if _, err := js.logs[0].Append(line(3)); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("append across the closing gate: %v, want EAGAIN", err)
	}
	before := js.storeBytes()
	for i := range js.logs {
		if _, err := js.logs[i].Append(line(4)); !errors.Is(err, syscall.EAGAIN) {
			t.Fatalf("append %d after the gate closed: %v, want EAGAIN", i, err)
		}
		if err := js.logs[i].Write(line(5)); !errors.Is(err, syscall.EAGAIN) {
			t.Fatalf("write %d after the gate closed: %v, want EAGAIN", i, err)
		}
	}
	for _, l := range js.logs {
		l.Close()
	}
	if err := js.j.Close(); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("close: %v, want EAGAIN", err)
	}
	testkit.Same(t, "the journal after its gate closed", before, js.storeBytes())
	if len(js.journalFiles()) != 1 {
		t.Fatalf("journal files %v: the file must stay for the next writer", js.journalFiles())
	}
}

// A gate closed before an append refuses it with EAGAIN and writes
// nothing at all.
func TestJournalGateClosedBeforeTheWrite(t *testing.T) {
	var closed atomic.Bool
	js := newJStore(t, 1, JournalConfig{CheckpointEvery: -1, Gate: func() error {
		if closed.Load() {
			return syscall.EAGAIN
		}
		return nil
	}})
	js.appendDurable(0, 1)
	before := js.storeBytes()
	closed.Store(true)
	if _, err := js.logs[0].Append(line(2)); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("append: %v, want EAGAIN", err)
	}
	testkit.Same(t, "a refused append", before, js.storeBytes())
	if !bytes.Equal(readFile(t, filepath.Join(js.dir, "s0/log")), js.want[0]) {
		t.Fatal("log changed")
	}
}

// A writer fenced off meanwhile may have made the file the journal's next
// rotation would take: the journal takes the name after it, and the
// stale file is passed over at replay.
func TestJournalRotatesPastAStaleWritersFile(t *testing.T) {
	js := newJStore(t, 1, JournalConfig{CheckpointEvery: -1, Token: 7})
	js.appendDurable(0, 1)
	stale := js.j.gen + 1
	at := js.place(0)
	b := encodeBatch(nil, stale, 0, 5, []*jrec{{kind: recIntent, path: at.Log, bind: at.Bind}})
	testkit.Must(t, os.WriteFile(filepath.Join(js.dir, jdir, journalName(stale)), b, 0o600))
	js.j.mu.Lock()
	js.j.rotateAt = 1
	js.j.mu.Unlock()
	js.appendDurable(0, 2)
	js.appendDurable(0, 3)
	if js.j.gen <= stale || !bytes.Equal(readFile(t, filepath.Join(js.dir, jdir, journalName(stale))), b) {
		t.Fatalf("the journal went on in generation %d, over the stale file %d", js.j.gen, stale)
	}
	js.crash()
	rec, err := RecoverJournal(js.root, jdir, js.locate, false)
	if err != nil || len(rec.Problems) > 0 || len(rec.Ignored) != 1 {
		t.Fatalf("recover: %v problems %s ignored %s", err, whats(rec.Problems), whats(rec.Ignored))
	}
	js.verify()
}

// A fence does not hide damage: a bad last batch in a journal file older
// than the newest (which was cut to its last batch before the next one
// was made, and which no writer writes again) is damage, with a fence as
// without one; only the newest file's end is where a fenced-off writer
// may have gone on.
func TestJournalFenceKeepsDamageOfAnOlderFile(t *testing.T) {
	js := newJStore(t, 1, JournalConfig{CheckpointEvery: -1})
	js.crash()
	testkit.Must(t, os.Remove(js.journalFiles()[0]))
	at := js.place(0)
	rec := func(kind byte, n int, off int64) *jrec {
		r := &jrec{kind: kind, path: at.Log, bind: at.Bind, off: off}
		if kind == recAppend {
			r.data = line(n)
		}
		return r
	}
	one, two := int64(len(line(1))), int64(len(line(2)))
	js.journalFile(1, 5, []*jrec{rec(recIntent, 0, 0)}, []*jrec{rec(recAppend, 1, 0)}, []*jrec{rec(recAppend, 2, one)})
	js.journalFile(2, 5, []*jrec{rec(recIntent, 0, 0)}, []*jrec{rec(recAppend, 3, one+two)})
	flipByte(t, filepath.Join(js.dir, jdir, journalName(1)), 2*journalAlign+batchHeaderLen+5)
	testkit.Must(t, FenceJournal(js.root, jdir, 7))
	rec1, err := RecoverJournal(js.root, jdir, js.locate, false)
	testkit.Must(t, err)
	if len(rec1.Problems) != 1 || !strings.Contains(rec1.Problems[0].What, "batch 2 at byte 8192 is damaged") {
		t.Fatalf("problems: %s", whats(rec1.Problems))
	}
}

// flipByte flips one bit of the byte at off of the file p.
func flipByte(t *testing.T, p string, off int64) {
	t.Helper()
	b := readFile(t, p)
	b[off] ^= 0x20
	testkit.Must(t, os.WriteFile(p, b, 0o600))
}

// A fence that does not read back whole (its checksum, a line) refuses
// the start and fsck's plan with EIO, changing nothing: which batches are
// history cannot be told without it.
func TestJournalDamagedFenceRefuses(t *testing.T) {
	js := newJStore(t, 1, JournalConfig{CheckpointEvery: -1, Token: 7})
	js.appendDurable(0, 1)
	js.crash()
	fence := filepath.Join(js.dir, jdir, "fence")
	flipByte(t, fence, int64(len(fenceHeader)+3))
	before := js.storeBytes()
	_, err := OpenJournal(js.root, jdir, js.locate, JournalConfig{Token: 8})
	testkit.WantErrno(t, "start with a damaged fence", err, syscall.EIO)
	_, err = PlanJournal(js.root, jdir, js.locate, true)
	testkit.WantErrno(t, "plan with a damaged fence", err, syscall.EIO)
	testkit.Same(t, "a refused start", before, js.storeBytes())
}

// Abandon, with no gate at all, stops the journal at once: appends get
// EAGAIN, and neither they nor closing the logs and the journal write
// anything (no seal, no checkpoint, the file left for the next writer).
func TestJournalAbandon(t *testing.T) {
	js := newJStore(t, 2, JournalConfig{CheckpointEvery: -1})
	js.appendDurable(0, 1)
	js.appendDurable(1, 2)
	before := js.storeBytes()
	js.j.Abandon()
	if _, err := js.logs[0].Append(line(3)); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("append after Abandon: %v, want EAGAIN", err)
	}
	for _, l := range js.logs {
		l.Close()
	}
	if err := js.j.Close(); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("close after Abandon: %v, want EAGAIN", err)
	}
	testkit.Same(t, "an abandoned journal", before, js.storeBytes())
}
