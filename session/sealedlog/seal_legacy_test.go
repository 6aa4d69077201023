package sealedlog

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// Seals of stores from before the journal may hold an append's intent
// record: an uncommitted record for the length an append would reach,
// synced before any byte of it was written. A crash of such a server
// left a log with none, some or all of that append's bytes. Nothing writes
// such a record any more, but Open, Verify and Repair still judge it: these
// tests make the states such a crash left, by hand.

// crashPoint is the state of both files at the instant a crash of a
// server before the journal would leave them: the intent record synced,
// and a part of the batch on disk (materialize).
type crashPoint struct {
	committed, batch []byte // log content acknowledged before, and the batch in flight
	seal             []byte
}

// legacyCrash is the crash state of an append of batch on top of two
// acknowledged lines: the seal holds the committed record of those (seq
// 2) and the intent for the batch (seq 3), each in its slot.
func legacyCrash(t *testing.T, batch []byte) crashPoint {
	committed := append(line(0), line(1)...)
	h := newHash()
	h.Write(committed)
	base := newRecord(2, int64(len(committed)), true, h, testBind)
	h.Write(batch)
	intent := newRecord(3, int64(len(committed)+len(batch)), false, h, testBind)
	seal := make([]byte, sealSize)
	for _, r := range []*record{base, intent} {
		copy(seal[int(r.seq%2)*slotSize:], r.encode(testKey))
	}
	return crashPoint{committed: committed, batch: batch, seal: seal}
}

// materialize writes the crash state with k bytes of the batch on disk.
func (cp crashPoint) materialize(t *testing.T, k int) (string, string) {
	p, s := paths(t)
	content := append(append([]byte{}, cp.committed...), cp.batch[:k]...)
	if err := os.WriteFile(p, content, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s, cp.seal, 0o600); err != nil {
		t.Fatal(err)
	}
	return p, s
}

// TestLegacyCrashStates: after a crash of a server before the journal at
// its seal/data boundary, with none, some or all of the batch on disk,
// Verify says what fsck should say, Open recovers (cutting unacknowledged
// bytes, keeping a complete batch), and the recovered log takes appends
// through the journal and verifies.
func TestLegacyCrashStates(t *testing.T) {
	batch := append(line(2), line(3)...)
	cp := legacyCrash(t, batch)
	P := len(cp.committed)
	for _, k := range []int{0, 1, len(line(2)), len(line(2)) + 3, len(batch) - 1, len(batch)} {
		t.Run(fmt.Sprintf("%d of %d bytes", k, len(batch)), func(t *testing.T) {
			p, s := cp.materialize(t, k)
			ps := Verify(at(t, p, s))
			switch {
			case k == 0 || k == len(batch):
				if len(ps) != 0 {
					t.Fatalf("verify: %s", whats(ps))
				}
			default:
				want := fmt.Sprintf("torn final append: %d bytes past the last sealed length %d", k, P)
				if len(ps) != 1 || !ps[0].Repairable || ps[0].What != want {
					t.Fatalf("verify: %s, want %q", whats(ps), want)
				}
			}
			l, err := Open(at(t, p, s))
			if err != nil {
				t.Fatal(err)
			}
			want := cp.committed
			if k == len(batch) {
				want = append(append([]byte{}, cp.committed...), batch...)
			}
			if err := l.Check(); err != nil || !bytes.Equal(readFile(t, p), want) || l.Size() != int64(len(want)) {
				t.Fatalf("after open: check %v, size %d, file %q", err, l.Size(), readFile(t, p))
			}
			mustAppend(t, l, line(4))
			l.Close()
			if ps := Verify(at(t, p, s)); len(ps) != 0 {
				t.Fatalf("verify after recovery: %s", whats(ps))
			}
		})
	}
}

// TestLegacyRepairTornAppend: Repair cuts exactly the torn bytes of a
// server before the journal and reseals; a second Repair has nothing to do.
func TestLegacyRepairTornAppend(t *testing.T) {
	batch := append(line(2), line(3)...)
	cp := legacyCrash(t, batch)
	k := len(line(2)) + 7
	p, s := cp.materialize(t, k)
	msg, err := Repair(at(t, p, s))
	if err != nil || msg != fmt.Sprintf("cut %d bytes of a torn final append", k) {
		t.Fatalf("repair: %q %v", msg, err)
	}
	if !bytes.Equal(readFile(t, p), cp.committed) {
		t.Fatal("repair cut the wrong bytes")
	}
	if ps := Verify(at(t, p, s)); len(ps) != 0 {
		t.Fatalf("verify after repair: %s", whats(ps))
	}
	if msg, err := Repair(at(t, p, s)); err != nil || msg != "nothing to repair" {
		t.Fatalf("second repair: %q %v", msg, err)
	}
}

// TestLegacyCrashLaterStates covers the other instants a crash of a
// server before the journal could hit.
func TestLegacyCrashLaterStates(t *testing.T) {
	batch := line(2)
	cp := legacyCrash(t, batch)

	// A torn seal write: the intent slot is half new, half old. The CRC
	// rejects it and the older record still vouches for the log.
	t.Run("torn intent slot", func(t *testing.T) {
		p, s := cp.materialize(t, 0)
		seal := readFile(t, s)
		copy(seal[slotSize*int(latestSeq(t, seal)%2)+100:], bytes.Repeat([]byte{0xAA}, 200))
		os.WriteFile(s, seal, 0o600)
		if ps := Verify(at(t, p, s)); len(ps) != 0 {
			t.Fatalf("verify: %s", whats(ps))
		}
	})

	// Open cut the torn bytes but crashed before resealing: the same intent
	// with no byte of its batch, which is consistent.
	t.Run("crash inside recovery", func(t *testing.T) {
		p, s := cp.materialize(t, 5)
		os.Truncate(p, int64(len(cp.committed)))
		if ps := Verify(at(t, p, s)); len(ps) != 0 {
			t.Fatalf("verify: %s", whats(ps))
		}
	})

	// A committed record is never treated as a crash: bytes missing under
	// it are damaged history, even if the record before would match.
	t.Run("cut under a committed record", func(t *testing.T) {
		p, s := cp.materialize(t, len(batch))
		l, err := Open(at(t, p, s)) // seals the complete batch as committed
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		os.Truncate(p, int64(len(cp.committed)+3))
		ps := Verify(at(t, p, s))
		if len(ps) == 0 || ps[0].Repairable || !strings.Contains(ps[0].What, "does not match seal") {
			t.Fatalf("verify: %s", whats(ps))
		}
		_, err = Repair(at(t, p, s))
		testkit.WantErrno(t, "Repair", err, syscall.EIO, "does not match seal")
	})
}

func latestSeq(t *testing.T, seal []byte) uint64 {
	f, _ := os.CreateTemp(t.TempDir(), "seal")
	defer f.Close()
	f.Write(seal)
	st, err := readSeal(f, testKey)
	if err != nil || st.latest == nil {
		t.Fatalf("seal unreadable: %v", err)
	}
	return st.latest.seq
}
