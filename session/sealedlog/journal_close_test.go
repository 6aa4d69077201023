package sealedlog

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// A log whose close-time checkpoint fails (its seal write gets an I/O
// error) still has its acknowledged append only in the journal. The
// journal then takes no more appends (EIO, nothing written), the log
// fails every later checkpoint (so no file holding its bytes is removed),
// and after a crash or a clean stop the next start replays the append: the
// log verifies against its seal and holds it.
func TestFailedCloseCheckpointKeepsJournal(t *testing.T) {
	for _, stop := range []string{"crash", "clean stop"} {
		t.Run(stop, func(t *testing.T) {
			js := newJStore(t, 2, JournalConfig{RotateAt: 2 * journalAlign, CheckpointEvery: -1})
			js.appendDurable(0, 1) // acknowledged: durable in the journal, not sealed
			failSealWrites(t, js, 0)
			l := js.logs[0]
			if err := l.Close(); err == nil {
				t.Fatal("the close-time checkpoint did not fail")
			}
			testkit.WantErrno(t, "checkpoint of the closed log", l.checkpoint(), syscall.EIO)

			before := js.storeBytes()
			_, err := js.logs[1].Append(line(3))
			testkit.WantErrno(t, "append after the failed close", err, syscall.EIO)
			testkit.Same(t, "a refused append", before, js.storeBytes())

			if stop == "crash" {
				js.crash()
			} else if err := js.j.Close(); err == nil {
				t.Fatal("the journal closed cleanly over a log it could not seal")
			}
			if len(js.journalFiles()) == 0 {
				t.Fatal("the journal file holding the unsealed append was removed")
			}
			js.open(JournalConfig{CheckpointEvery: -1})
			if ps := Verify(js.placeNoJournal(0)); len(ps) > 0 {
				t.Fatalf("log 0 after the restart: %s", whats(ps))
			}
			if got := readFile(t, filepath.Join(js.dir, js.place(0).Log)); !bytes.Equal(got, js.want[0]) {
				t.Fatalf("log 0 holds %q, want %q", got, js.want[0])
			}
		})
	}
}

// failSealWrites makes every later write to log i's seal fail, as an I/O
// error would: a read-only descriptor in place of the read-write one.
func failSealWrites(t *testing.T, js *jstore, i int) {
	t.Helper()
	l := js.logs[i]
	ro, err := os.Open(filepath.Join(js.dir, js.place(i).Seal))
	testkit.Must(t, err)
	good := l.seal
	l.seal = ro
	t.Cleanup(func() { good.Close() })
}
