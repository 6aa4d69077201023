package integration

import (
	"strings"
	"testing"
	"time"
)

// TestCancelClientIDNewestRun: a cancel by client id without a session
// stops the newest queued or running run with that id among the caller's
// sessions at the agent, and that run alone (SPEC 7); with a session it
// stops that session's run. There is no cancel-all (SPEC 10).
func TestCancelClientIDNewestRun(t *testing.T) {
	release := t.TempDir()
	s := newFuseServerWith(t, func(s *server) {
		s.define("stepper", map[string]string{"program": strings.ReplaceAll(stepperProgram, "RELEASE", release)})
	})
	ends := map[string]chan []frame{}
	for _, session := range []string{"older", "newer", "third"} {
		end := make(chan []frame, 1)
		ends[session] = end
		go func() {
			frames, _ := s.request("stepper", `{"op":"send","id":"dup","session":"`+session+`","input":"step"}`)
			end <- frames
		}()
		eventually(t, 10*time.Second, session+"'s run waits", func() bool {
			return strings.Contains(readOr(s.mnt("home/0/agent/stepper/session/"+session+"/events.jsonl")), `"text":"first"`)
		})
		time.Sleep(20 * time.Millisecond) // a later start, whatever the clock's grain
	}
	runOf := func(session string) string {
		st := s.mustRequest("stepper", `{"op":"status","session":"`+session+`"}`)
		runs, _ := st[0]["runs"].([]any)
		if len(runs) != 1 {
			t.Fatalf("status of %s: %v", session, st)
		}
		return runs[0].(map[string]any)["run"].(string)
	}
	older, newer, third := runOf("older"), runOf("newer"), runOf("third")

	c := s.mustRequest("stepper", `{"op":"cancel","id":"dup","session":"newer"}`)
	if len(c) != 1 || c[0]["run"] != newer || c[0]["cancelled"] != true {
		t.Fatalf("cancel dup in session newer: %v, want run %s cancelled", c, newer)
	}
	if got := frameTypes(<-ends["newer"]); !strings.HasSuffix(got, "done cancelled") {
		t.Errorf("newer's send: %s, want it to end cancelled", got)
	}
	c = s.mustRequest("stepper", `{"op":"cancel","id":"dup"}`)
	if len(c) != 1 || c[0]["run"] != third || c[0]["cancelled"] != true {
		t.Fatalf("cancel dup without a session: %v, want the newest running run %s (older %s)", c, third, older)
	}
	if got := frameTypes(<-ends["third"]); !strings.HasSuffix(got, "done cancelled") {
		t.Errorf("third's send: %s, want it to end cancelled", got)
	}
	if got := runOf("older"); got != older {
		t.Errorf("older's run %s after the cancels, want %s still running", got, older)
	}
	releaseRun(t, release, "older")
	if got := frameTypes(<-ends["older"]); !strings.HasSuffix(got, "done ok") {
		t.Errorf("older's send after the cancels: %s, want done ok", got)
	}
}
