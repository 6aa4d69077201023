package session

import (
	"context"
	"encoding/json"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/agent"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/runqueue"
	"github.com/ctxfs/ctxfs/session/waiting"
)

// TestResumedRunTakesItsAnswerForTheShownCallOnly: the answer that
// resumes a dormant run is given for the call its recorded request
// showed; when the run's first call is another (its id, its tool or its
// arguments), the answer is refused EIO and the call is not made.
func TestResumedRunTakesItsAnswerForTheShownCallOnly(t *testing.T) {
	shown := waiting.Call{Key: waiting.Key{Run: "ctx-1", Call: "call_1"}, Kind: waiting.KindApproval,
		Name: "shell.exec", Arguments: json.RawMessage(`{"command":"make && make test"}`)}
	same := agent.ToolCall{ID: "call_1", Name: "shell.exec", Arguments: `{"command":"make \u0026\u0026 make test"}`}
	if err := (&presetAnswer{call: shown}).answers(waiting.Call{Kind: waiting.KindApproval, Name: same.Name, Arguments: json.RawMessage(same.Arguments)}, same.ID); err != nil {
		t.Fatalf("the shown call, its arguments escaped otherwise: %v", err)
	}
	for what, c := range map[string]agent.ToolCall{
		"another id":        {ID: "call_2", Name: "shell.exec", Arguments: `{"command":"make && make test"}`},
		"another tool":      {ID: "call_1", Name: "fs.write", Arguments: `{"command":"make && make test"}`},
		"another argument":  {ID: "call_1", Name: "shell.exec", Arguments: `{"command":"id"}`},
		"an argument added": {ID: "call_1", Name: "shell.exec", Arguments: `{"command":"make && make test","timeout":1}`},
	} {
		back := make(chan answered, 1)
		rn := &run{id: "ctx-1", q: runqueue.New("ctx-1", maxRunStream, func() {})}
		rn.host = &toolHost{rn: rn, preset: &presetAnswer{call: shown, a: waiting.Answer{Kind: waiting.KindApproval, Decision: proto.DecisionAllowOnce}, reply: back}}
		decided := make(chan string, 1)
		go func() { d, _ := rn.host.Approve(context.Background(), c); decided <- d }()
		select {
		case d := <-decided:
			if d != proto.DecisionStop {
				t.Errorf("%s: decision %s, want the run stopped", what, d)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the run went on to record the answer", what)
		}
		if got := <-back; !errors.Is(got.err, syscall.EIO) {
			t.Errorf("%s: the answer got %v, want EIO", what, got.err)
		}
	}
}
