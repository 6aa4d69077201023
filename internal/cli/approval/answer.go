package approval

import (
	"fmt"
	"strings"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/proto"
)

const ApproveHelp = `Answers a tool call that waits for approval (ctx agent pending lists
them; send and chat print the command): allow it once (the default), allow
it and later calls of the same tool in this run (--run), deny it (--deny:
the model is told it was denied and the run goes on), or deny it and stop
the run (--stop). Only the session's owner, or for a shared session the
run's requester, may answer (EACCES). A call of a shared session is
answered with --shared SPACE, one of a temp session with --scope temp
(as pending and send show). Exit status: 0 answered; 2 refused:
EACCES, ENOENT (no call waits with that id), EALREADY (it was answered
already, or timed out), EINVAL.
`

const AnswerHelp = `Answers a question a run asked with its ask_user tool (ctx agent pending
lists them). TEXT words are joined with spaces; --shared SPACE and
--scope temp as for approve. Exit status as approve:
0 answered; 2 refused (EACCES, ENOENT, EALREADY, EINVAL).
`

// Approve is `ctx agent approve AGENT RUN CALL [--deny|--run|--stop]`.
func Approve(e *clienv.Env, p *clienv.Parsed) int {
	decision, err := decisionOf(p)
	if err != nil {
		return clienv.Fail(e, "approve", err, clienv.ExitUsage)
	}
	w, run, id, err := target(e, p)
	if err != nil {
		return clienv.Fail(e, "approve", err, clienv.ExitUsage)
	}
	f, err := clienv.Call(e, w, ApproveRequest(w, run, id, decision, p.Str("reason")), proto.FrameApprovalResult)
	if err != nil {
		return fail(e, "approve", err)
	}
	if p.On("json") {
		e.Stdout.Write(append(f.Line[:len(f.Line):len(f.Line)], '\n'))
	} else {
		fmt.Fprintf(e.Stdout, "%s: call %s of run %s\n", decisionLine(f.Obj), clienv.Printable(id), run)
	}
	return clienv.ExitOK
}

// Answer is `ctx agent answer AGENT RUN CALL TEXT...`.
func Answer(e *clienv.Env, p *clienv.Parsed) int {
	w, run, id, err := target(e, p)
	if err != nil {
		return clienv.Fail(e, "answer", err, clienv.ExitUsage)
	}
	text := strings.Join(p.Args[3:], " ")
	if text == "" {
		return clienv.UsageError(e, "answer", "the answer is empty")
	}
	f, err := clienv.Call(e, w, AnswerRequest(w, run, id, text), proto.FrameAnswer)
	if err != nil {
		return fail(e, "answer", err)
	}
	if p.On("json") {
		e.Stdout.Write(append(f.Line[:len(f.Line):len(f.Line)], '\n'))
	} else {
		fmt.Fprintf(e.Stdout, "answered call %s of run %s\n", clienv.Printable(id), run)
	}
	return clienv.ExitOK
}

// target is the agent's socket, the run and the call id of the command
// line AGENT RUN CALL.
func target(e *clienv.Env, p *clienv.Parsed) (w *clienv.Where, run, id string, err error) {
	run, id = p.Args[1], p.Args[2]
	switch {
	case !abi.IsRunID(run):
		return nil, "", "", clienv.BadUsage(fmt.Sprintf("%q is not a run id (ctx- and 32 hex digits; ctx agent pending lists the waiting calls)", run))
	case id == "":
		return nil, "", "", clienv.BadUsage("the call id is empty")
	}
	w, err = clienv.ResolveLoc(e, p, p.Args[0])
	return w, run, id, err
}

// decisionOf is the decision the flags name: allow_once without one.
func decisionOf(p *clienv.Parsed) (string, error) {
	decision := proto.DecisionAllowOnce
	n := 0
	for flag, d := range map[string]string{"deny": proto.DecisionDeny, "run": proto.DecisionAllowRun, "stop": proto.DecisionStop} {
		if p.On(flag) {
			decision = d
			n++
		}
	}
	if n > 1 {
		return "", clienv.BadUsage("--deny, --run and --stop exclude each other")
	}
	return decision, nil
}
