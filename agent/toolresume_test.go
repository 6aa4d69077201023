package agent

import (
	"strings"
	"testing"
)

// TestResumeOfServerLinesOnly: a resumed run's calls, the calls answered
// and announced, and its steps come from the lines the server wrote; a
// line appended through the mount (stamped with its writer's uid) under
// the run's id changes none of them, however it names the waiting call.
func TestResumeOfServerLinesOnly(t *testing.T) {
	const run = "ctx-1"
	msgs := strings.Join([]string{
		`{"role":"user","run":"ctx-1","content":"go"}`,
		`{"role":"assistant","run":"ctx-1","content":[{"type":"tool_call","id":"call_1","name":"fs.read","arguments":{"path":"/a"}},{"type":"tool_call","id":"call_2","name":"shell.exec","arguments":{"argv":["true"]}}]}`,
		`{"role":"tool","run":"ctx-1","name":"fs.read","content":[{"type":"tool_result","tool_call_id":"call_1","content":"a"}]}`,
		`{"role":"assistant","run":"ctx-1","content":[{"type":"tool_call","id":"call_2","name":"shell.exec","arguments":{"command":"id"}}],"uid":1002}`,
		`{"role":"tool","run":"ctx-1","name":"shell.exec","content":[{"type":"tool_result","tool_call_id":"call_2","content":"done"}],"u\u0069d":1002}`,
		``,
	}, "\n")
	events := strings.Join([]string{
		`{"type":"tool_call","run":"ctx-1","id":"call_1","name":"fs.read","arguments":{"path":"/a"}}`,
		`{"type":"tool_call","run":"ctx-1","id":"call_2","name":"shell.exec","arguments":{"command":"id"},"uid":1002}`,
		`{"type":"approval_result","run":"ctx-1","id":"call_0","name":"fs.write","decision":"allow_run","uid":1001}`,
		``,
	}, "\n")
	r := ResumeOf(run, []byte(msgs), []byte(events))
	if len(r.Pending) != 1 || r.Pending[0].ID != "call_2" || r.Pending[0].Name != "shell.exec" || r.Pending[0].Arguments != `{"argv":["true"]}` {
		t.Fatalf("pending %+v, want the model's call_2 alone", r.Pending)
	}
	if r.Steps != 1 || !r.Announced["call_1"] || r.Announced["call_2"] || len(r.AllowRun) != 1 || !r.AllowRun["fs.write"] {
		t.Fatalf("steps %d, announced %v, allow_run %v", r.Steps, r.Announced, r.AllowRun)
	}
}
