package approval

import (
	"fmt"
	"slices"

	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/proto"
)

// Auto answers allow_once the approval requests of the tools a command
// was given with --approve TOOL (send, chat), each on a new connection
// to the agent's socket, while the reply that brought the request goes on.
type Auto struct {
	e     *clienv.Env
	w     *clienv.Where
	cmd   string // the command, for messages ("send")
	tools []string
}

// NewAuto answers for tools (nil when there are none: a nil *Auto
// answers nothing).
func NewAuto(e *clienv.Env, w *clienv.Where, cmd string, tools []string) *Auto {
	if len(tools) == 0 {
		return nil
	}
	return &Auto{e: e, w: w, cmd: cmd, tools: tools}
}

// Answers reports whether o is an approval request a allows.
func (a *Auto) Answers(o *proto.Object) bool {
	return a != nil && o.Str("type") == proto.FrameApprovalRequest && slices.Contains(a.tools, o.Str("name"))
}

// Handle answers o when a allows its tool, and reports whether o needs
// nothing more. A refused answer (another answered first: EALREADY) is
// reported on stderr, and o is then left to the caller as unanswered.
func (a *Auto) Handle(o *proto.Object) bool {
	if !a.Answers(o) {
		return false
	}
	return Reply(a.e, a.w, a.cmd, ApproveRequest(a.w, o.Str("run"), o.Str("id"), proto.DecisionAllowOnce, ""), proto.FrameApprovalResult)
}

// Reply sends an answering op (the recorded result comes back on the
// run's own reply too, where it is printed) and reports whether the
// server took it; a refusal is reported on stderr as cmd's.
func Reply(e *clienv.Env, w *clienv.Where, cmd string, req *proto.Object, want string) bool {
	if _, err := clienv.Call(e, w, req, want); err != nil {
		fmt.Fprintf(e.Stderr, "ctx: %s: %s %s: %s\n", cmd, req.Str("op"), clienv.Printable(req.Str("id")), clienv.Describe(cmd, err))
		return false
	}
	return true
}
