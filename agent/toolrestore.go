package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
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

// RestoreFits is EFBIG when the calls that put steps back take more than a
// log line to record: runRestore records them as one assistant message, and
// the logs refused that line with its batch while the writes went on (a
// kept content of over about 760 KiB, as base64, is one). The restore op
// asks it before any run starts.
func RestoreFits(steps []def.RestoreStep) error {
	if m := callsMessage("", restoreCalls(steps)); !fitsLine(m) {
		return abi.Errorf(syscall.EFBIG, "restore", "the calls that put back %d files take %d bytes to record, more than a log line (%d): nothing was restored (name one PATH at a time; a file's content of more than about 760 KiB cannot be put back by a run)", len(steps), len(m.Line()), abi.MaxLineBytes)
	}
	return nil
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
