package integration

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestApprovalReusedCallID: a model that gives every reply's call the id
// call_1 has each later call renamed (ctx-N), so each waits for its own
// approval and has its own records, rather than the run ending EALREADY;
// after a restart the resumed run still knows call_1 as used.
func TestApprovalReusedCallID(t *testing.T) {
	p := newFakeProvider(t, scripted(
		openAICall("call_1", "shell_exec", `{"argv":["echo","one"]}`),
		openAICall("call_1", "shell_exec", `{"argv":["echo","two"]}`),
		openAICall("call_1", "shell_exec", `{"argv":["echo","three"]}`),
		openAIReply("all done")))
	s := newToolServer(t, p.URL+"/v1", map[string]string{"tools": "shell.exec\n", "perm": "rx\n", "approval": "ask\n"})
	done := s.sendAsync(owner, "dup", "go")
	approve := func(want string) string {
		t.Helper()
		calls := s.pendingOf(owner, 1)
		if len(calls) != 1 {
			t.FailNow()
		}
		c := calls[0]
		if c["id"] != want {
			t.Fatalf("pending call %v, want id %s", c, want)
		}
		run := c["run"].(string)
		if res := s.answerAs(owner, fmt.Sprintf(`{"op":"approve","run":%q,"id":%q,"decision":"allow_once"}`, run, want)); res["type"] != "approval_result" {
			t.Fatalf("approve %s: %v", want, res)
		}
		return run
	}
	run := approve("call_1")
	events := filepath.Join(s.sessionDir(1001, "doer", "dup"), "events.jsonl")
	eventually(t, 20*time.Second, "the second call's recorded approval_request", func() bool {
		return strings.Contains(fileBytes(t, events), `"type":"approval_request","run":"`+run+`","id":"ctx-2"`)
	})
	if t.Failed() {
		select {
		case frames := <-done:
			t.Fatalf("the run ended: %v", frames[max(0, len(frames)-3):])
		case <-time.After(time.Second):
			t.FailNow()
		}
	}
	s.restart(syscall.SIGKILL) // the resumed run reads call_1 as used from its history
	<-done
	if approve("ctx-2") != run {
		t.Fatal("the resumed run has another id")
	}
	approve("ctx-3")
	eventually(t, 20*time.Second, "the run's end", func() bool {
		return strings.Contains(fileBytes(t, events), `"type":"done","run":"`+run+`"`)
	})
	ev := fileBytes(t, events)
	if !strings.Contains(ev, `"type":"done","run":"`+run+`","status":"ok"`) || strings.Contains(ev, "EALREADY") {
		t.Fatalf("events.jsonl:\n%s", ev)
	}
	msgs := fileBytes(t, filepath.Join(s.sessionDir(1001, "doer", "dup"), "messages.jsonl"))
	for i, id := range []string{"call_1", "ctx-2", "ctx-3"} {
		for _, want := range []string{
			`"type":"approval_request","run":"` + run + `","id":"` + id + `"`,
			`"type":"approval_result","run":"` + run + `","id":"` + id + `","name":"shell.exec","decision":"allow_once"`,
		} {
			if strings.Count(ev, want) != 1 {
				t.Errorf("events.jsonl holds %d of %s", strings.Count(ev, want), want)
			}
		}
		for _, want := range []string{
			`{"type":"tool_call","id":"` + id + `","name":"shell.exec"`,
			`"tool_call_id":"` + id + `","content":`,
		} {
			if strings.Count(msgs, want) != 1 {
				t.Errorf("messages.jsonl holds %d of %s", strings.Count(msgs, want), want)
			}
		}
		if word := []string{"one", "two", "three"}[i]; !resultSays(msgs, id, word) {
			t.Errorf("messages.jsonl lacks the result of %s (%s):\n%s", id, word, msgs)
		}
	}
	if !strings.Contains(msgs, "all done") {
		t.Errorf("messages.jsonl:\n%s", msgs)
	}
	fsckClean(t, s)
}

// resultSays reports whether the tool message of call id in msgs holds word.
func resultSays(msgs, id, word string) bool {
	for _, line := range strings.Split(msgs, "\n") {
		if strings.Contains(line, `"tool_call_id":"`+id+`"`) && strings.Contains(line, word) {
			return true
		}
	}
	return false
}
