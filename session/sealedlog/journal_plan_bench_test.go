package sealedlog

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestPlanJournalForAsPlanJournal: the plan of one log says of it what
// the plan of every log says, beside a running writer: logs the journal
// extends, one sealed and untouched since, one whose bytes past its seal
// were changed, one cut short, and a log the journal holds nothing of.
func TestPlanJournalForAsPlanJournal(t *testing.T) {
	const logs = 6
	js := newJStore(t, logs, JournalConfig{CheckpointEvery: -1})
	for n := 0; n < 60; n++ {
		if i := n % (logs - 1); i != 4 || n < 5 {
			js.appendDurable(i, n)
		}
	}
	js.appendDurable(0, 99) // waits for what was queued before it
	flip := filepath.Join(js.dir, "s2/log")
	b, err := os.ReadFile(flip)
	testkit.Must(t, err)
	b[len(b)-3] ^= 1
	testkit.Must(t, os.WriteFile(flip, b, 0o600))
	testkit.Must(t, os.Truncate(filepath.Join(js.dir, "s3/log"), 10))
	all, err := PlanJournal(js.root, jdir, js.locate, true)
	testkit.Must(t, err)
	damaged := 0
	for i := range logs {
		at := js.placeNoJournal(i)
		one, err := PlanJournalFor(js.root, jdir, js.locate, true, at.Bind)
		testkit.Must(t, err)
		want, got := whats(all.Verify(at)), whats(one.Verify(at))
		if got != want {
			t.Errorf("log %d: alone %q, among all %q", i, got, want)
		}
		if want != "" {
			damaged++
		}
	}
	if damaged != 2 {
		t.Errorf("%d logs found damaged, want 2 (s2, s3)", damaged)
	}
}

// BenchmarkPlanJournalOneLog: what a follower pays to verify one log at
// its open (cluster/replica/verify.go): the journal read beside a writer
// whose journal holds 16 MiB of appends to 256 logs, and the log checked
// against its seal and its share of it: every log planned (all:
// PlanJournal, as followers did first), the one (one: PlanJournalFor),
// and the one by a JournalReader that read the journal before (reader).
func BenchmarkPlanJournalOneLog(b *testing.B) {
	const logs = 256
	js := newJStore(b, logs, JournalConfig{CheckpointEvery: -1})
	big := bytes.Repeat([]byte("x"), 4000)
	for i := 0; i < 4096; i++ {
		l := append([]byte(`{"role":"user","content":"`), big...)
		if _, err := js.logs[i%logs].Append(append(l, "\"}\n"...)); err != nil {
			b.Fatal(err)
		}
	}
	js.appendDurable(0, 1)
	at := js.placeNoJournal(7)
	jr := NewJournalReader(js.root, jdir)
	for _, c := range []struct {
		name string
		plan func() (*JournalPlan, error)
	}{
		{"all", func() (*JournalPlan, error) { return PlanJournal(js.root, jdir, js.locate, true) }},
		{"one", func() (*JournalPlan, error) { return PlanJournalFor(js.root, jdir, js.locate, true, at.Bind) }},
		{"reader", func() (*JournalPlan, error) { return jr.Plan(js.locate, true, at.Bind) }}, // nothing new since the last
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				plan, err := c.plan()
				if err != nil {
					b.Fatal(err)
				}
				if problems := plan.Verify(at); len(problems) > 0 {
					b.Fatal(whats(problems))
				}
			}
		})
	}
}
