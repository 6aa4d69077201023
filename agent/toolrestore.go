package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/agent/tools"
	"github.com/ctxfs/ctxfs/proto"
)

// restoreTools are the tools a restore calls: a write of the earlier
// content, a removal for a file that did not exist.
var restoreTools = []string{tools.FSWrite, tools.FSRemove}

// runRestore puts files back as a run of the agent's own (SPEC 17): each
// step is a call of fs.write or fs.remove, recorded as an assistant
// message with its calls, decided like a model's calls (approval ask),
// executed as the session's uid in the agent's isolation and versioned,
// so that a restore can itself be undone.
func runRestore(ctx context.Context, s Spec, emit func(*proto.Object)) bool {
	calls := restoreCalls(s.Def.Restore.Steps)
	l := newToolLoop(s, emit, len(calls), restoreTools)
	defer l.tools.close()
	if pending := l.resume(); len(pending) > 0 {
		calls, l.maxSteps = pending, l.steps+len(pending)
	} else if len(calls) > 0 {
		emit(callsMessage("", calls))
	}
	if !l.callAll(ctx, calls) {
		return false
	}
	emit(messageFrame(fmt.Sprintf("Restored %d of %d files.", len(calls)-l.failed, len(calls))))
	return l.failed == 0
}

// restoreCalls are the calls that put the steps back, with ids of their
// own ("restore-N").
func restoreCalls(steps []def.RestoreStep) []ToolCall {
	calls := make([]ToolCall, 0, len(steps))
	for i, st := range steps {
		c := ToolCall{ID: "restore-" + strconv.Itoa(i+1), Name: tools.FSRemove}
		args := map[string]string{"path": st.Path}
		if !st.Absent {
			c.Name = tools.FSWrite
			args["content_base64"] = base64.StdEncoding.EncodeToString(st.Content)
		}
		b, _ := json.Marshal(args) // a map of strings always marshals
		c.Arguments = string(b)
		calls = append(calls, c)
	}
	return calls
}
