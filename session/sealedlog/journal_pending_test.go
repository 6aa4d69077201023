package sealedlog

import (
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
