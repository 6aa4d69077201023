package sealedlog

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// A crash at every instant of the journaled protocol: a script of appends
// (single, paired, written then synced), a log's close and reopening (its
// checkpoint and retire record), rotations and their checkpoints, and a
// clean stop, runs once; at each named instant (Journal.mark: a log
// written, a batch written, a batch durable, a log synced, a log sealed,
// the value files written, a journal file removed, the next file made) the
// whole store is taken as a crash then leaves it. Each state is then
// recovered as a start would, as is, and as a power loss may leave it.

// storeState is the store's files at one instant.
type storeState struct {
	instant string
	step    string
	dirs    []string
	files   map[string]storeFile
	// acked is what each log had acknowledged; inflight what the step
	// running may add to each (one unit: all of it, in every log, or none).
	acked, inflight [][]byte
}

type storeFile struct {
	data []byte
	mode fs.FileMode
}

// takeStore reads every directory and regular file under dir. A journal
// file's zeros reserved past its last batch are left off (replay takes
// the file's end, or zeros, as its end alike).
//
// The instant is marked by one goroutine while the checkpointer may go on
// in another, so a file listed may be gone when it is read: it is taken as
// gone. That is the later state, and still one a crash can leave: the
// checkpointer removes a journal file only after it has sealed every log
// the file covers, and the walk reads j/ before the logs' directories, so
// everything read after the removal is later too.
func takeStore(t *testing.T, dir string) ([]string, map[string]storeFile) {
	var dirs []string
	files := map[string]storeFile{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return vanished(p, dir, err)
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return vanished(p, dir, err)
		}
		switch {
		case d.IsDir():
			dirs = append(dirs, rel)
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return vanished(p, dir, err)
			}
			if _, ok := parseJournalName(d.Name()); ok {
				b = trimZeros(b)
			}
			files[rel] = storeFile{b, info.Mode().Perm()}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs, files
}

// vanished is nil for a file under dir that was removed while the walk
// went by (see takeStore) and err for anything else.
func vanished(p, dir string, err error) error {
	if p != dir && errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// trimZeros cuts b after the journal block that holds its last non-zero byte.
func trimZeros(b []byte) []byte {
	n := len(b)
	for n > 0 && b[n-1] == 0 {
		n--
	}
	return b[:min(len(b), (n+journalAlign-1)/journalAlign*journalAlign)]
}

// put makes the state in a new directory and returns it.
func (st *storeState) put(t *testing.T) string {
	dir := t.TempDir()
	for _, d := range st.dirs {
		testkit.Must(t, os.MkdirAll(filepath.Join(dir, d), 0o700))
	}
	for rel, f := range st.files {
		testkit.Must(t, os.WriteFile(filepath.Join(dir, rel), f.data, f.mode))
	}
	return dir
}

// crashScript runs the script on a store of two logs and returns the state
// at every instant.
func crashScript(t *testing.T) []*storeState {
	js := newJStore(t, 2, JournalConfig{RotateAt: 2 * journalAlign, CheckpointEvery: -1})
	var mu sync.Mutex
	var states []*storeState
	step := "create"
	inflight := make([][]byte, 2)
	js.j.mu.Lock()
	js.j.instant = func(name string) {
		mu.Lock()
		defer mu.Unlock()
		st := &storeState{instant: name, step: step}
		st.dirs, st.files = takeStore(t, js.dir)
		for i := range js.want {
			st.acked = append(st.acked, bytes.Clone(js.want[i]))
			st.inflight = append(st.inflight, bytes.Clone(inflight[i]))
		}
		states = append(states, st)
	}
	js.j.mu.Unlock()
	run := func(name string, adds [2][]byte, do func() error) {
		t.Helper()
		mu.Lock()
		step, inflight = name, [][]byte{adds[0], adds[1]}
		mu.Unlock()
		if err := do(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		js.j.settle(t) // the checkpointer is done before the next step
		mu.Lock()
		for i := range js.want {
			js.want[i] = append(js.want[i], adds[i]...)
		}
		inflight = [][]byte{nil, nil}
		mu.Unlock()
	}
	appendTo := func(i, n int) {
		var adds [2][]byte
		adds[i] = line(n)
		run(fmt.Sprintf("append %d to log %d", n, i), adds, func() error { _, err := js.logs[i].Append(line(n)); return err })
	}
	for n := 0; n < 4; n++ {
		appendTo(n%2, n)
	}
	run("a pair", [2][]byte{line(10), line(11)}, func() error { return AppendPair(js.logs[0], line(10), js.logs[1], line(11)) })
	run("a write, then its sync", [2][]byte{nil, line(12)}, func() error {
		if err := js.logs[1].Write(line(12)); err != nil {
			return err
		}
		return js.logs[1].Sync()
	})
	run("log 0 closed and opened again", [2][]byte{}, func() error {
		if err := js.logs[0].Close(); err != nil {
			return err
		}
		l, err := Open(js.place(0))
		js.logs[0] = l
		return err
	})
	for n := 20; n < 30; n++ { // past RotateAt: files rotate and are checkpointed
		appendTo(n%2, n)
	}
	run("a pair after the rotations", [2][]byte{line(40), line(41)}, func() error { return AppendPair(js.logs[1], line(41), js.logs[0], line(40)) })
	run("a clean stop", [2][]byte{}, func() error {
		for _, l := range js.logs {
			if err := l.Close(); err != nil {
				return err
			}
		}
		return js.j.Close()
	})
	return states
}

// TestJournalCrashAtEveryInstant: every state recovers, as is and as a
// power loss may leave it, to logs that hold every acknowledged append and
// the unit in flight whole or not at all, that verify against their seals,
// and that take appends again.
func TestJournalCrashAtEveryInstant(t *testing.T) {
	states := crashScript(t)
	seen := map[string]int{}
	for _, st := range states {
		seen[st.instant]++
	}
	for _, want := range []string{"log written", "batch written", "batch durable", "log synced", "log sealed", "values written", "journal file removed", "next file made"} {
		if seen[want] == 0 {
			t.Errorf("no crash was taken at %q (%v)", want, seen)
		}
	}
	t.Logf("%d instants: %v", len(states), seen)
	for k, st := range states {
		for _, loss := range powerLosses {
			if !loss.applies(st) {
				continue
			}
			t.Run(fmt.Sprintf("%03d %s, %s: %s", k, st.step, st.instant, loss.name), func(t *testing.T) {
				dir := st.put(t)
				loss.do(t, dir, st)
				recoverState(t, dir, st, loss.tornTail)
			})
		}
	}
}

// powerLoss is what a power loss may take of a state beyond a process
// crash: bytes never synced.
type powerLoss struct {
	name     string
	applies  func(st *storeState) bool
	do       func(t *testing.T, dir string, st *storeState)
	tornTail bool // the batch in flight is torn: its unit did not happen
}

var powerLosses = []powerLoss{
	{"as a process crash leaves it", func(*storeState) bool { return true }, func(*testing.T, string, *storeState) {}, false},
	// A log's bytes past its seal were synced by no one but a checkpoint,
	// which seals them next: all of them may be gone, or a part, cut
	// inside a line. The journal holds every durable one.
	{"each log cut back to its seal", func(*storeState) bool { return true }, func(t *testing.T, dir string, _ *storeState) {
		cutLogs(t, dir, func(sealed, size int64) int64 { return sealed })
	}, false},
	{"each log torn in the line after its seal", func(*storeState) bool { return true }, func(t *testing.T, dir string, _ *storeState) {
		cutLogs(t, dir, func(sealed, size int64) int64 { return sealed + min(size-sealed, 7) })
	}, false},
	// A batch written and not yet synced may be torn: its end lost.
	{"the batch in flight torn", func(st *storeState) bool { return st.instant == "batch written" }, func(t *testing.T, dir string, _ *storeState) {
		tearNewestBatch(t, dir)
	}, true},
}

// cutLogs cuts each log s<i>/log of dir to cut(sealed, size).
func cutLogs(t *testing.T, dir string, cut func(sealed, size int64) int64) {
	for i := 0; ; i++ {
		log, seal := filepath.Join(dir, fmt.Sprintf("s%d/log", i)), filepath.Join(dir, fmt.Sprintf("s%d/seal", i))
		fi, err := os.Stat(log)
		if err != nil {
			return
		}
		ss, _ := readSealFile(t, seal)
		if ss.latest == nil {
			t.Fatalf("%s holds no record", seal)
		}
		if n := cut(ss.latest.length, fi.Size()); n < fi.Size() {
			testkit.Must(t, os.Truncate(log, n))
		}
	}
}

// tearNewestBatch zeroes the second half of the newest journal file's
// last batch.
func tearNewestBatch(t *testing.T, dir string) {
	names, _ := filepath.Glob(filepath.Join(dir, jdir, journalPrefix+"*"))
	if len(names) == 0 {
		t.Fatal("no journal file")
	}
	sort.Strings(names)
	f := names[len(names)-1]
	at := lastBatch(t, f)
	b := readFile(t, f)
	h, _ := decodeHeader(b[at:])
	end := at + int64(batchHeaderLen+h.body)
	mid := at + (end-at)/2
	copy(b[mid:end], make([]byte, end-mid))
	testkit.Must(t, os.WriteFile(f, b, 0o600))
}

// recoverState replays the journal of the state at dir as a start would,
// checks what the logs hold, replays once more as a start after a crash
// inside that replay would (its removal of the journal lost: the same
// records again), then opens the logs and appends to them.
func recoverState(t *testing.T, dir string, st *storeState, tornTail bool) {
	js := reopenStore(t, dir, len(st.acked))
	kept := journalCopies(t, dir)
	rec, err := RecoverJournal(js.root, jdir, js.locate, false)
	if err != nil || len(rec.Problems) > 0 || len(rec.Held) > 0 {
		t.Fatalf("recover: %v, problems %s, held %s", err, whats(rec.Problems), whats(rec.Held))
	}
	checkRecovered(t, js, st, tornTail)
	for name, b := range kept {
		testkit.Must(t, os.WriteFile(name, b, 0o600))
	}
	rec, err = RecoverJournal(js.root, jdir, js.locate, false)
	if err != nil || len(rec.Problems) > 0 || len(rec.Held) > 0 {
		t.Fatalf("recover again: %v, problems %s, held %s", err, whats(rec.Problems), whats(rec.Held))
	}
	checkRecovered(t, js, st, tornTail)
	js.open(JournalConfig{})
	for i := range js.logs {
		js.appendDurable(i, 1000+i)
	}
	for _, l := range js.logs {
		testkit.Must(t, l.Close())
	}
	testkit.Must(t, js.j.Close())
	js.verify()
}

// reopenStore is a jstore over the store at dir, its journal not started.
func reopenStore(t *testing.T, dir string, logs int) *jstore {
	js := newJStoreAt(t, dir)
	js.logs, js.want = make([]*Log, logs), make([][]byte, logs)
	return js
}

func journalCopies(t *testing.T, dir string) map[string][]byte {
	names, _ := filepath.Glob(filepath.Join(dir, jdir, journalPrefix+"*"))
	out := map[string][]byte{}
	for _, n := range names {
		out[n] = readFile(t, n)
	}
	return out
}

// checkRecovered: each log holds what was acknowledged, plus the unit in
// flight whole in every log or in none (none when its batch was torn),
// and verifies against its seal alone.
func checkRecovered(t *testing.T, js *jstore, st *storeState, tornTail bool) {
	t.Helper()
	with := 0
	for i := range st.acked {
		got := readFile(t, filepath.Join(js.dir, fmt.Sprintf("s%d/log", i)))
		whole := append(bytes.Clone(st.acked[i]), st.inflight[i]...)
		switch {
		case len(st.inflight[i]) > 0 && bytes.Equal(got, whole):
			with++
		case bytes.Equal(got, st.acked[i]):
		default:
			t.Fatalf("log %d holds\n%s\nwant what was acknowledged\n%s\nand perhaps %q", i, got, st.acked[i], st.inflight[i])
		}
		if ps := Verify(js.placeNoJournal(i)); len(ps) > 0 {
			t.Fatalf("log %d: %s", i, whats(ps))
		}
		js.want[i] = got
	}
	units := 0
	for _, b := range st.inflight {
		if len(b) > 0 {
			units++
		}
	}
	if with != 0 && with != units || tornTail && with != 0 {
		t.Fatalf("the unit in flight is in %d of its %d logs (torn batch: %v)", with, units, tornTail)
	}
}
