package session

import (
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/session/fsck"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/sealedlog"
)

// A writer host that lost its lease abandons the store: its running
// agent's process is killed, and nothing more is written to the store,
// by the run's end, the journal, the derived values, a later send (EAGAIN)
// or the engine's Close, even while its gate still says open (Abandon
// shuts it for good).
func TestAbandonKillsRunsAndWritesNothing(t *testing.T) {
	env := newEnv(t)
	env.define("slow", map[string]string{"program": "#!/bin/sh\necho pid $$\nexec sleep 60\n", "abi": "text"})
	testkit.Must(t, env.e.Close())
	gate := func() error { return nil }
	e, err := Open(Config{Store: env.store, Root: env.root, Token: 3, Gate: gate})
	testkit.Must(t, err)
	env.e = e
	t.Cleanup(func() { e.Close() })
	slow := Target{Kind: abi.KindAgent, Owner: "slow"}
	r := env.begin(root0, slow, `{"op":"send","id":"c1","input":"go"}`)
	var pid int
	for pid == 0 {
		f := next(t, r)
		if text, ok := f.String("text"); ok && strings.HasPrefix(text, "pid ") {
			pid, err = strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(text, "pid ")))
			testkit.Must(t, err)
		}
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	e.derived.Flush("", false)
	testkit.Must(t, e.wal.Sync()) // what is queued lazily lands before, not during, the look
	before := env.settledTree()

	e.Abandon()
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Fatalf("the run's program %d is still there after Abandon: %v", pid, err)
	}
	_, err = env.do(root0, slow, `{"op":"send","id":"c2","session":"other","input":"go"}`)
	testkit.WantErrno(t, "a send after Abandon", err, syscall.EAGAIN)
	r.Close()
	e.Close()
	testkit.Same(t, "an abandoned engine", before, testkit.Snapshot(t, env.store, nil))
}

// A writer fenced off while it still runs (its token below the fence's)
// goes on sending: fsck passes its batches over as a note, and finds no
// problem.
func TestFsckNotesAFencedOffWriter(t *testing.T) {
	env := newEnv(t)
	env.send(root0, coder(), `{"op":"send","id":"a1","input":"one"}`)
	testkit.Must(t, sealedlog.FenceJournal(env.e.admin, layout.JournalDir, 7))
	env.send(root0, coder(), `{"op":"send","id":"a2","input":"two"}`) // a stale writer's send
	var problems, notes []string
	n, err := fsck.Check(env.store, false, false, fsck.Report{
		Problem: func(path, what string) { problems = append(problems, path+": "+what) },
		Note:    func(path, what string) { notes = append(notes, path+": "+what) },
	})
	testkit.Must(t, err)
	if n != 0 || len(problems) > 0 {
		t.Fatalf("%d problems: %q", n, problems)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "written after its writer's lease was lost (the fence is at token 7)") {
		t.Fatalf("notes %q", notes)
	}
}
