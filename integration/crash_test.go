package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// SIGKILL the server while several clients send; after a restart fsck is
// clean, no line is torn, and every start a client received is recorded
// exactly once.
func TestCrashWhileSending(t *testing.T) {
	s := newServer(t)
	stop := make(chan struct{})
	// Eight clients, three sessions: clients share sessions.
	wait := s.sendersUntil(8, stop, func(c int) string { return fmt.Sprintf("crash-%d", c%3) })
	time.Sleep(1500 * time.Millisecond)
	s.kill(s.cmd, syscall.SIGKILL)
	close(stop)
	received := wait(40 * time.Second)
	if len(received) == 0 {
		t.Fatal("no send got a start frame before the kill")
	}
	s.start()
	// A status request loads (and so recovers) each session.
	for i := 0; i < 3; i++ {
		s.mustRequest("coder", fmt.Sprintf(`{"op":"status","session":"crash-%d"}`, i))
	}
	if out, code := s.fsck(); code != 0 {
		t.Fatalf("fsck after the crash: exit %d\n%s", code, out)
	}
	starts := map[string]int{}
	for i := 0; i < 3; i++ {
		dir := s.sessionDir(0, "coder", fmt.Sprintf("crash-%d", i))
		for run, n := range recordedStarts(t, filepath.Join(dir, "events.jsonl")) {
			starts[run] += n
		}
		msgs := fileBytes(t, filepath.Join(dir, "messages.jsonl"))
		for _, line := range strings.Split(strings.TrimSuffix(msgs, "\n"), "\n") {
			if line != "" && !json.Valid([]byte(line)) {
				t.Fatalf("%s: torn message line %q", dir, line)
			}
		}
		if len(msgs) > 0 && !strings.HasSuffix(msgs, "\n") {
			t.Fatalf("%s/messages.jsonl ends in a torn line", dir)
		}
	}
	for run := range received {
		if starts[run] != 1 {
			t.Errorf("run %s: client got its start, recorded %d times", run, starts[run])
		}
	}
	t.Logf("%d starts received before the kill, %d recorded", len(received), len(starts))
	// Runs the kill interrupted are closed: no start without done is left.
	for i := 0; i < 3; i++ {
		ev := fileBytes(t, filepath.Join(s.sessionDir(0, "coder", fmt.Sprintf("crash-%d", i)), "events.jsonl"))
		if strings.Count(ev, `"type":"start"`) != strings.Count(ev, `"type":"done"`) {
			t.Errorf("crash-%d: %d starts, %d dones", i, strings.Count(ev, `"type":"start"`), strings.Count(ev, `"type":"done"`))
		}
	}
}

// Damage behind the server's back: the next send is EIO and writes nothing;
// fsck reports the damage and exits 1; reading still works.
func TestDamagedHistoryOverSocket(t *testing.T) {
	s := newServer(t)
	s.mustRequest("coder", `{"op":"send","id":"c1","input":"hello"}`)
	settle() // the derived files reach the store behind
	dir := s.sessionDir(0, "coder", "default")
	p := filepath.Join(dir, "messages.jsonl")
	b := []byte(fileBytes(t, p))
	b[len(b)-5] ^= 1
	testkit.Must(t, os.WriteFile(p, b, 0o600))
	before := snapshot(t, s.store)
	frames := s.mustRequest("coder", `{"op":"send","id":"c2","input":"more"}`)
	if len(frames) != 1 || frames[0]["type"] != "error" || frames[0]["code"] != "EIO" {
		t.Fatalf("send to damaged history: %v", frames)
	}
	testkit.Same(t, "a send to damaged history", before, snapshot(t, s.store))
	out, code := s.fsck()
	if code != 1 || !strings.Contains(out, p+": ") {
		t.Fatalf("fsck: exit %d\n%s", code, out)
	}
}
