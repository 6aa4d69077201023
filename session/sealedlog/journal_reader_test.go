package sealedlog

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"

	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestJournalReaderAsPendingValues: beside a writer whose journal files
// rotate and are checkpointed, a reader asking again and again gets what
// PendingValues reads afresh, for two prefixes, after every change, and
// reads each batch once while it can follow the journal.
func TestJournalReaderAsPendingValues(t *testing.T) {
	js := newJStore(t, 2, JournalConfig{RotateAt: 2 * journalAlign, CheckpointEvery: -1})
	own := storefs.Owner{Uid: -1, Gid: -1, DirMode: 0o700, FileMode: 0o640}
	pr := NewJournalReader(js.root, jdir)
	same := func(step string) {
		t.Helper()
		js.j.settle(t) // no checkpoint between the two reads compared
		for _, under := range []string{"s0/", "s1/"} {
			want, err := PendingValues(js.root, jdir, under)
			testkit.Must(t, err)
			got, err := pr.Values(under)
			testkit.Must(t, err)
			if !reflect.DeepEqual(got, want) {
				for g, pf := range pr.files {
					t.Logf("gen %d: end %d, batch %d, values %v", g, pf.end, pf.num, pf.values)
				}
				t.Fatalf("%s, under %s: reader %v, afresh %v (files %v)", step, under, got, want, js.journalFiles())
			}
		}
	}
	same("empty")
	for n := range 60 {
		rel := fmt.Sprintf("s%d/v%d", n%2, n%5)
		if n%7 == 3 {
			testkit.Must(t, js.j.RemoveValue(rel))
		} else {
			testkit.Must(t, js.j.PutValue(rel, []byte(fmt.Sprintf("value %d\n", n)), own))
		}
		js.appendDurable(n%2, n) // waits for the value's batch; files rotate past two pages
		same(fmt.Sprintf("change %d", n))
	}
	read := pr.read
	same("nothing new")
	if pr.read != read {
		t.Errorf("asked again with nothing new, the reader read %d batches", pr.read-read)
	}
	if len(js.journalFiles()) > 3 {
		t.Logf("journal files: %v", js.journalFiles())
	}
}

// TestJournalReaderFiles: with the checkpointer held before it removes a
// file, the journal keeps several files whose values overlap; the reader
// lays the newer over the older as PendingValues does, and forgets the
// files once they are checkpointed.
func TestJournalReaderFiles(t *testing.T) {
	js := newJStore(t, 2, JournalConfig{RotateAt: 2 * journalAlign, CheckpointEvery: -1})
	own := storefs.Owner{Uid: -1, Gid: -1, DirMode: 0o700, FileMode: 0o640}
	release := make(chan struct{})
	var released sync.Once
	free := func() { released.Do(func() { close(release) }) }
	t.Cleanup(free) // before the journal's Close, which waits for the checkpointer
	js.j.instant = func(name string) {
		if name == "values written" {
			<-release
		}
	}
	pr := NewJournalReader(js.root, jdir)
	same := func(step string) {
		t.Helper()
		want, err := PendingValues(js.root, jdir, "s0/")
		testkit.Must(t, err)
		got, err := pr.Values("s0/")
		testkit.Must(t, err)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: reader %v, afresh %v (files %v)", step, got, want, js.journalFiles())
		}
	}
	for n := range 12 {
		rel := fmt.Sprintf("s0/v%d", n%3)
		if n%4 == 3 {
			testkit.Must(t, js.j.RemoveValue(rel))
		} else {
			testkit.Must(t, js.j.PutValue(rel, []byte(fmt.Sprintf("value %d\n", n)), own))
		}
		js.appendDurable(0, n)
		same(fmt.Sprintf("change %d", n))
	}
	if files := js.journalFiles(); len(files) < 3 {
		t.Fatalf("the checkpointer held, the journal has %d files", len(files))
	}
	free()
	js.j.settle(t)
	same("checkpointed")
	read := pr.read
	same("nothing new")
	if pr.read != read {
		t.Errorf("asked again with nothing new, the reader read %d batches", pr.read-read)
	}
}

// TestJournalReaderDamage: a damaged batch with batches after it, which
// the reader cannot follow, and a file whose last batch read is no longer
// what it was, each read the journal whole: what PendingValues says.
func TestJournalReaderDamage(t *testing.T) {
	own := storefs.Owner{Uid: -1, Gid: -1, DirMode: 0o700, FileMode: 0o640}
	for _, what := range []string{"a batch not read yet", "the last batch read"} {
		t.Run(what, func(t *testing.T) {
			js := newJStore(t, 1, JournalConfig{CheckpointEvery: -1})
			pr := NewJournalReader(js.root, jdir)
			_, err := pr.Values("s0/")
			testkit.Must(t, err)
			for n := range 4 {
				testkit.Must(t, js.j.PutValue(fmt.Sprintf("s0/v%d", n), []byte("a\n"), own))
				js.appendDurable(0, n)
			}
			files := js.journalFiles()
			name := files[len(files)-1]
			b, err := os.ReadFile(name)
			testkit.Must(t, err)
			at := bytes.Index(b, []byte("s0/v1")) // a batch with batches after it
			if what == "the last batch read" {
				_, err := pr.Values("s0/")
				testkit.Must(t, err)
				at = int(pr.files[js.j.gen].lastAt) + 20 // its header's checksum
			}
			b[at] ^= 0xff
			testkit.Must(t, os.WriteFile(name, b, 0o600))
			want, err := PendingValues(js.root, jdir, "s0/")
			testkit.Must(t, err)
			got, err := pr.Values("s0/")
			testkit.Must(t, err)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("reader %v, afresh %v", got, want)
			}
			if len(want) == 4 {
				t.Fatalf("the damage took nothing: %v", want)
			}
		})
	}
}

// TestJournalReaderFence: a fence that appears after the reader read a
// stale writer's batch past it (the fence was decided before that batch,
// and written after) makes the reader read again: the batch no longer
// counts.
func TestJournalReaderFence(t *testing.T) {
	js := newJStore(t, 1, JournalConfig{CheckpointEvery: -1, Token: 5})
	own := storefs.Owner{Uid: -1, Gid: -1, DirMode: 0o700, FileMode: 0o640}
	pr := NewJournalReader(js.root, jdir)
	testkit.Must(t, js.j.PutValue("s0/a", []byte("1\n"), own))
	js.appendDurable(0, 1)
	testkit.Must(t, FenceJournal(js.root, jdir, 7))
	fence := filepath.Join(js.dir, FencePath(jdir))
	testkit.Must(t, os.Rename(fence, fence+".aside"))
	testkit.Must(t, js.j.PutValue("s0/b", []byte("2\n"), own)) // the stale writer goes on
	js.appendDurable(0, 2)
	if got, err := pr.Values("s0/"); err != nil || len(got) != 2 {
		t.Fatalf("without the fence: %v, %v", got, err)
	}
	testkit.Must(t, os.Rename(fence+".aside", fence))
	want, err := PendingValues(js.root, jdir, "s0/")
	testkit.Must(t, err)
	got, err := pr.Values("s0/")
	testkit.Must(t, err)
	if !reflect.DeepEqual(got, want) || len(want) != 1 {
		t.Fatalf("with the fence: reader %v, afresh %v", got, want)
	}
}

// TestJournalReaderUnreadable: a value's last change that cannot be read
// leaves the value out, not the change before it in an older file, as
// PendingValues does.
func TestJournalReaderUnreadable(t *testing.T) {
	js := newJStoreAt(t, t.TempDir())
	testkit.Must(t, js.root.Mkdir(jdir, 0o700))
	value := func(data string) *jrec {
		return &jrec{kind: recValue, path: "s0/x", data: append(make([]byte, valueHeader), data...)}
	}
	short := &jrec{kind: recValue, path: "s0/x", data: []byte("short")} // no owner header
	js.journalFile(1, 0, []*jrec{value("old\n")})
	js.journalFile(2, 0, []*jrec{short})
	want, err := PendingValues(js.root, jdir, "s0/")
	testkit.Must(t, err)
	got, err := NewJournalReader(js.root, jdir).Values("s0/")
	testkit.Must(t, err)
	if !reflect.DeepEqual(got, want) || len(want) != 0 {
		t.Fatalf("reader %v, afresh %v", got, want)
	}
}

// TestJournalReaderPlanAsPlanJournalFor: a reader asked again and again
// to plan one log says of each log what PlanJournalFor says afresh:
// beside a writer whose files rotate while its checkpointer is held
// (several files, logs sealed past their records), after bytes past a
// seal were changed and a log was cut short, and once the files are
// checkpointed; and it reads each batch once.
func TestJournalReaderPlanAsPlanJournalFor(t *testing.T) {
	const logs = 4
	js := newJStore(t, logs, JournalConfig{RotateAt: 2 * journalAlign, CheckpointEvery: -1})
	release := make(chan struct{})
	var released sync.Once
	free := func() { released.Do(func() { close(release) }) }
	t.Cleanup(free)
	js.j.instant = func(name string) {
		if name == "values written" {
			<-release
		}
	}
	jr := NewJournalReader(js.root, jdir)
	same := func(step string, wantDamaged int) {
		t.Helper()
		damaged := 0
		for i := range logs {
			at := js.placeNoJournal(i)
			fresh, err := PlanJournalFor(js.root, jdir, js.locate, true, at.Bind)
			testkit.Must(t, err)
			read, err := jr.Plan(js.locate, true, at.Bind)
			testkit.Must(t, err)
			want, got := whats(fresh.Verify(at)), whats(read.Verify(at))
			if got != want {
				t.Fatalf("%s, log %d: reader %q, afresh %q (files %v)", step, i, got, want, js.journalFiles())
			}
			if want != "" {
				damaged++
			}
		}
		if damaged != wantDamaged {
			t.Fatalf("%s: %d logs damaged, want %d", step, damaged, wantDamaged)
		}
	}
	for n := range 24 {
		js.appendDurable(n%logs, n)
		if n%3 == 2 {
			same(fmt.Sprintf("append %d", n), 0)
		}
	}
	if files := js.journalFiles(); len(files) < 3 {
		t.Fatalf("the checkpointer held, the journal has %d files", len(files))
	}
	read := jr.read
	same("nothing new", 0)
	if jr.read != read {
		t.Errorf("asked again with nothing new, the reader read %d batches", jr.read-read)
	}
	// An append not yet committed (a write through the mount, durable at
	// its fsync or within a second): served as the writer took it, its
	// log having an intent in the journal.
	testkit.Must(t, js.logs[1].Write(line(99)))
	same("an append not committed yet", 0)
	for i := range 2 { // bytes past the seals: the journal's records prove them
		js.appendDurable(2+i, 100+i)
	}
	flip := filepath.Join(js.dir, "s2/log")
	b, err := os.ReadFile(flip)
	testkit.Must(t, err)
	b[len(b)-3] ^= 1
	testkit.Must(t, os.WriteFile(flip, b, 0o600))
	st, err := os.Stat(filepath.Join(js.dir, "s3/log"))
	testkit.Must(t, err)
	testkit.Must(t, os.Truncate(filepath.Join(js.dir, "s3/log"), st.Size()-5))
	same("damaged", 2)
	free()
	js.j.settle(t)
	same("checkpointed", 2)
}

// TestJournalReaderRecordsBound: past the log records it keeps, a reader
// plans from the journal read whole (what PlanJournalFor says of every
// log), and still reads values from what it kept.
func TestJournalReaderRecordsBound(t *testing.T) {
	defer func(n int) { maxLogRecords = n }(maxLogRecords)
	maxLogRecords = 3
	const logs = 3
	js := newJStore(t, logs, JournalConfig{CheckpointEvery: -1})
	own := storefs.Owner{Uid: -1, Gid: -1, DirMode: 0o700, FileMode: 0o640}
	testkit.Must(t, js.j.PutValue("s0/v", []byte("a\n"), own))
	for n := range 9 {
		js.appendDurable(n%logs, n)
	}
	jr := NewJournalReader(js.root, jdir)
	for i := range logs {
		at := js.placeNoJournal(i)
		fresh, err := PlanJournalFor(js.root, jdir, js.locate, true, at.Bind)
		testkit.Must(t, err)
		read, err := jr.Plan(js.locate, true, at.Bind)
		testkit.Must(t, err)
		if want, got := whats(fresh.Verify(at)), whats(read.Verify(at)); got != want || want != "" {
			t.Fatalf("log %d: reader %q, afresh %q", i, got, want)
		}
	}
	if jr.kept > maxLogRecords || !jr.partial() {
		t.Fatalf("kept %d log records (at most %d), partial %v", jr.kept, maxLogRecords, jr.partial())
	}
	want, err := PendingValues(js.root, jdir, "s0/")
	testkit.Must(t, err)
	if got, err := jr.Values("s0/"); err != nil || !reflect.DeepEqual(got, want) || len(got) != 1 {
		t.Fatalf("values: reader %v (%v), afresh %v", got, err, want)
	}
}
