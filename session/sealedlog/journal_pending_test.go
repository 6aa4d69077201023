package sealedlog

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestPendingValues: a running writer's value changes, read beside it
// before any checkpoint: the last of each file under the prefix asked,
// a removal as removed, files elsewhere left out; the journal and the
// store unchanged by the reading.
func TestPendingValues(t *testing.T) {
	js := newJStore(t, 1, JournalConfig{CheckpointEvery: -1})
	own := storefs.Owner{Uid: -1, Gid: -1, DirMode: 0o700, FileMode: 0o640}
	for _, v := range []string{"a\n", "b\n", "c\n"} {
		testkit.Must(t, js.j.PutValue("s0/current", []byte(v), own))
	}
	testkit.Must(t, js.j.PutValue("s0/by-cwd", []byte("x\n"), own))
	testkit.Must(t, js.j.RemoveValue("s0/by-cwd"))
	testkit.Must(t, js.j.PutValue("elsewhere/current", []byte("e\n"), own))
	js.appendDurable(0, 1) // waits for everything queued before it
	before := testkit.Snapshot(t, js.dir, nil)
	got, err := PendingValues(js.root, jdir, "s0/")
	testkit.Must(t, err)
	if len(got) != 2 || string(got["s0/current"].Data) != "c\n" || got["s0/current"].Removed ||
		!got["s0/by-cwd"].Removed || got["s0/by-cwd"].Data != nil {
		t.Errorf("pending values: %+v", got)
	}
	testkit.Same(t, "reading the pending values", before, testkit.Snapshot(t, js.dir, nil))
}

// BenchmarkPendingValues: what a follower host pays for each read of a
// container's index (once a second while asked): the journal's value
// records read beside a writer whose journal holds 16 MiB of appends
// (a quarter of a generation) and a few hundred value changes.
func BenchmarkPendingValues(b *testing.B) {
	js := newJStore(b, 16, JournalConfig{CheckpointEvery: -1})
	own := storefs.Owner{Uid: -1, Gid: -1, DirMode: 0o700, FileMode: 0o640}
	big := bytes.Repeat([]byte("x"), 4000)
	for i := 0; i < 4096; i++ {
		l := append([]byte(`{"role":"user","content":"`), big...)
		if _, err := js.logs[i%16].Append(append(l, "\"}\n"...)); err != nil {
			b.Fatal(err)
		}
		if i%16 == 0 {
			testkit.Must(b, js.j.PutValue(fmt.Sprintf("s0/v%d", (i/16)%64), []byte("a\n"), own))
		}
	}
	js.appendDurable(0, 1)
	pr := NewJournalReader(js.root, jdir)
	for _, reader := range []bool{false, true} {
		name := "afresh"
		if reader {
			name = "reader" // JournalReader: the batches new since the last read (none here)
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				read := func(under string) (map[string]PendingValue, error) { return PendingValues(js.root, jdir, under) }
				if reader {
					read = pr.Values
				}
				got, err := read("s0/")
				if err != nil || len(got) != 64 {
					b.Fatalf("%d values, %v", len(got), err)
				}
			}
		})
	}
}
