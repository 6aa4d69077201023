package send

import (
	"fmt"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/cli/approval"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/proto"
)

// The frames of calls that wait for a person (SPEC 17), as the printer
// shows them: a request nobody here answers goes to stderr, in a pipe
// too (the run waits, and whoever reads the output must know), with the
// command that answers it; what answered it, and a run that resumed,
// are tool lines on a terminal.

// request handles an approval_request or a question.
func (p *SendPrinter) request(t string, o *proto.Object) {
	if t == proto.FrameApprovalRequest {
		p.toolNames[o.Str("id")] = o.Str("name")
	}
	if p.Answer != nil && p.Answer(o) || p.json {
		return
	}
	p.endLine()
	fmt.Fprintf(p.errw, "ctx: %s: %s\n  %s\n", p.cmd, requestLine(t, o), approval.Command(p.Where, o))
}

// requestLine says what a request asks.
func requestLine(t string, o *proto.Object) string {
	run := clienv.Printable(o.Str("run"))
	if t == proto.FrameQuestion {
		return fmt.Sprintf("run %s asks: %s", run, approval.What(o))
	}
	return fmt.Sprintf("run %s waits for approval of %s %s", run, clienv.Printable(o.Str("name")), approval.What(o))
}

// answeredLine is the tool line of an approval_result ("✓ fs.write allowed
// once", "✗ fs.write denied (timeout)"), an answer ("» answered: TEXT",
// "» no answer (timeout)") or a resumed frame. callName names the tool when the result does not.
func answeredLine(t string, o *proto.Object, callName string) string {
	switch t {
	case proto.FrameAnswer:
		if r := o.Str("reason"); r != "" { // the question timed out: no one answered
			return "» no answer (" + clienv.Printable(r) + ")"
		}
		return "» answered: " + clienv.Printable(abi.Clip(o.Str("text"), maxToolError))
	case proto.FrameResumed:
		return "… run " + clienv.Printable(o.Str("run")) + " resumed after the server restarted"
	}
	mark := "✗"
	if d := o.Str("decision"); d == proto.DecisionAllowOnce || d == proto.DecisionAllowRun {
		mark = "✓"
	}
	name := o.Str("name")
	if name == "" {
		name = callName
	}
	return mark + " " + clienv.Printable(name) + " " + approval.DecisionText(o)
}
