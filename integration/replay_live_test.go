package integration

import (
	"strings"
	"testing"
	"time"
)

// TestReplayOfARunningSend: a send retried with the same client id and
// payload while its run still runs is a replay (SPEC 8.5): the original
// start, what the run recorded so far, then its live frames to its done;
// it runs nothing and writes nothing (one user message, one start). The
// same id with another input is EINVAL meanwhile.
func TestReplayOfARunningSend(t *testing.T) {
	release := t.TempDir()
	s := newFuseServerWith(t, func(s *server) {
		s.define("stepper", map[string]string{"program": strings.ReplaceAll(stepperProgram, "RELEASE", release)})
	})
	const req = `{"op":"send","id":"r1","session":"live","input":"step"}`
	first := make(chan []frame, 1)
	go func() {
		frames, _ := s.request("stepper", req)
		first <- frames
	}()
	logs := "home/0/agent/stepper/session/live/"
	eventually(t, 10*time.Second, "the run's first message recorded", func() bool {
		return strings.Contains(readOr(s.mnt(logs+"events.jsonl")), `"text":"first"`)
	})
	if frames := s.mustRequest("stepper", `{"op":"send","id":"r1","session":"live","input":"another"}`); errorCode(frames) != "EINVAL" {
		t.Errorf("the running send's id with another input: %v, want EINVAL", frames)
	}
	again := make(chan []frame, 1)
	go func() {
		frames, _ := s.request("stepper", req)
		again <- frames
	}()
	// Most likely joined before the release, so that the rest comes live;
	// a replay that joins later reads the same frames from the log.
	time.Sleep(300 * time.Millisecond)
	releaseRun(t, release, "live")
	orig, replay := <-first, <-again
	if len(orig) == 0 || len(replay) == 0 || replay[0]["type"] != "start" || replay[0]["run"] != orig[0]["run"] {
		t.Fatalf("replay %v of run %v", replay, orig)
	}
	want := "start,tool_call,message,tool_result,message,done ok"
	if got := strings.ReplaceAll(frameTypes(replay), ",delta", ""); got != want {
		t.Errorf("replay of the running send: %s, want %s", got, want)
	}
	msgs := s.readMnt(logs + "messages.jsonl")
	events := s.readMnt(logs + "events.jsonl")
	if strings.Count(msgs, `"role":"user"`) != 1 || strings.Count(events, `"type":"start"`) != 1 || strings.Count(events, `"type":"done"`) != 1 {
		t.Errorf("the replay wrote:\nmessages:\n%s\nevents:\n%s", msgs, events)
	}
}
