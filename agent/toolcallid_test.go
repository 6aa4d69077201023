package agent

import (
	"strings"
	"testing"
)

// TestNameCallsGivesEachCallItsOwnID: an id the run used already (the
// model's call_1 in each reply, one a resumed run's history holds, or a
// ctx-N the model chose itself) is renamed like a missing or invalid one,
// so no two calls of a run share an id.
func TestNameCallsGivesEachCallItsOwnID(t *testing.T) {
	l := newToolLoop(Spec{Resume: &Resume{Steps: 2, Used: map[string]bool{"call_0": true, "ctx-3": true}}}, nil, 32, nil)
	defer l.tools.close()
	l.resume()
	var got []string
	for _, reply := range [][]ToolCall{
		{{ID: "call_1"}, {ID: "call_0"}},
		{{ID: "call_1"}, {ID: ""}, {ID: "ctx-9"}},
		{{ID: "ctx-8"}, {ID: "bad id"}},
	} {
		l.nameCalls(reply)
		for _, c := range reply {
			got = append(got, c.ID)
		}
		l.steps += len(reply)
	}
	if want := "call_1 ctx-4 ctx-5 ctx-6 ctx-9 ctx-8 ctx-10"; strings.Join(got, " ") != want {
		t.Fatalf("ids %q, want %q", strings.Join(got, " "), want)
	}
}

// TestResumeOfKeepsUsedIDs: a resumed run knows every call id of its
// server-written history as used, answered or not; a line appended
// through the mount (stamped) adds none.
func TestResumeOfKeepsUsedIDs(t *testing.T) {
	msgs := strings.Join([]string{
		`{"role":"assistant","run":"ctx-1","content":[{"type":"tool_call","id":"call_1","name":"fs.read","arguments":{}}]}`,
		`{"role":"tool","run":"ctx-1","name":"fs.read","content":[{"type":"tool_result","tool_call_id":"call_1","content":"a"}]}`,
		`{"role":"assistant","run":"ctx-1","content":[{"type":"tool_call","id":"ctx-2","name":"fs.read","arguments":{}}]}`,
		`{"role":"assistant","run":"ctx-2","content":[{"type":"tool_call","id":"other","name":"fs.read","arguments":{}}]}`,
		`{"role":"assistant","run":"ctx-1","content":[{"type":"tool_call","id":"forged","name":"fs.read","arguments":{}}],"uid":1002}`,
	}, "\n")
	r := ResumeOf("ctx-1", []byte(msgs), nil)
	if len(r.Used) != 2 || !r.Used["call_1"] || !r.Used["ctx-2"] {
		t.Fatalf("used %v, want call_1 and ctx-2", r.Used)
	}
}
