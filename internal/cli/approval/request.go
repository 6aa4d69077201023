package approval

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/proto"
)

// ApproveRequest is the op approve of call id of run, which waits in a
// session of w's scope (the server finds a shared or temp session's
// call only in that scope; the session itself need not be named).
func ApproveRequest(w *clienv.Where, run, id, decision, reason string) *proto.Object {
	req := decideRequest(w, proto.OpApprove, run, id)
	req.Set("decision", decision)
	if reason != "" {
		req.Set("reason", reason)
	}
	return req
}

// AnswerRequest is the op answer of question id of run, as ApproveRequest.
func AnswerRequest(w *clienv.Where, run, id, text string) *proto.Object {
	req := decideRequest(w, proto.OpAnswer, run, id)
	req.Set("text", text)
	return req
}

func decideRequest(w *clienv.Where, op, run, id string) *proto.Object {
	req := proto.NewObject("op", op, "run", run, "id", id)
	w.SetScope(req)
	return req
}

// Command is the command line that answers the request o (an
// approval_request or a question) of a run in w, for a person to copy.
func Command(w *clienv.Where, o *proto.Object) string {
	verb, rest := "approve", "[--deny|--run|--stop]"
	if o.Str("type") == proto.FrameQuestion {
		verb, rest = "answer", "TEXT"
	}
	return strings.Join([]string{"ctx agent", verb, w.Loc.Agent, shellWord(o.Str("run")), shellWord(o.Str("id")) + w.ScopeFlags(), rest}, " ")
}

// plainWord is a word the shell takes as it is.
var plainWord = regexp.MustCompile(`^[A-Za-z0-9_.,:/=+@%-]+$`)

// shellWord quotes s for a POSIX shell when it needs it: call ids are the
// model's, and may hold anything.
func shellWord(s string) string {
	if plainWord.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(clienv.Printable(s), "'", `'\''`) + "'"
}

// decisionLine says what an approval_result decided, for a person.
func decisionLine(o *proto.Object) string {
	return fmt.Sprintf("%s %s", clienv.Printable(o.Str("name")), DecisionText(o))
}

// DecisionText is "allowed once", "denied (timeout)", … for an
// approval_result.
func DecisionText(o *proto.Object) string {
	var s string
	switch d := o.Str("decision"); d {
	case proto.DecisionAllowOnce:
		s = "allowed once"
	case proto.DecisionAllowRun:
		s = "allowed for this run"
	case proto.DecisionDeny:
		s = "denied"
	case proto.DecisionStop:
		s = "denied, and the run stopped"
	default:
		s = clienv.Printable(d)
	}
	if r := o.Str("reason"); r != "" {
		s += " (" + clienv.Printable(abi.Clip(r, maxShown)) + ")"
	}
	return s
}

// maxShown bounds a piece of a request (arguments, a question, a reason)
// in a line for a person; --json has it whole.
const maxShown = 200

// fail is the exit status of a command that failed with err: 130 for a
// Ctrl+C, else as clienv.Fail reports it.
func fail(e *clienv.Env, cmd string, err error) int {
	if err == context.Canceled {
		return clienv.ExitInterrupted
	}
	return clienv.Fail(e, cmd, err, clienv.ExitFailed)
}
