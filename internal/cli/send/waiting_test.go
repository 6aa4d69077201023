package send

import (
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/proto"
)

const (
	approvalRequest = `{"type":"approval_request","run":"R","id":"c1","name":"fs.write","arguments":{"path":"a.txt", "content":"hi"},"ts":"2026-12-02T03:00:00.000Z"}` + "\n"
	approvalAllowed = `{"type":"approval_result","run":"R","id":"c1","name":"fs.write","decision":"allow_once","uid":1001,"ts":"x"}` + "\n"
	approvalTimeout = `{"type":"approval_result","run":"R","id":"c1","decision":"deny","uid":0,"reason":"timeout","ts":"x"}` + "\n"
	question        = `{"type":"question","run":"R","id":"q 1","text":"which\nbranch?","ts":"x"}` + "\n"
	answered        = `{"type":"answer","run":"R","id":"q 1","uid":1001,"text":"main","ts":"x"}` + "\n"
	unanswered      = `{"type":"answer","run":"R","id":"q 1","uid":0,"text":"","reason":"timeout","ts":"x"}` + "\n"
	resumed         = `{"type":"resumed","run":"R","ts":"x"}` + "\n"
)

func waitingPrinter(terminal bool) *SendPrinter {
	p := NewSendPrinter(nil, nil, false, nil)
	p.Where = &clienv.Where{Loc: client.Loc{Agent: "coder"}, Scope: "private"}
	if terminal {
		p.tools, p.width = true, 200
	}
	return p
}

// A request nobody here answers goes to stderr, in a pipe too, with the
// command that answers it (a call id the shell would split is quoted);
// the output keeps only the text.
func TestPrintRequestsInPipe(t *testing.T) {
	reply := start + `{"type":"delta","run":"R","text":"writing"}` + "\n" + approvalRequest + approvalAllowed + question + answered +
		`{"type":"delta","run":"R","text":" done"}` + "\n" + doneOK
	out, errs, code := printWith(t, reply, waitingPrinter(false))
	wantErrs := `ctx: send: run R waits for approval of fs.write {"path":"a.txt","content":"hi"}` + "\n" +
		"  ctx agent approve coder R c1 [--deny|--run|--stop]\n" +
		"ctx: send: run R asks: which branch?\n" +
		"  ctx agent answer coder R 'q 1' TEXT\n"
	if out != "writing done\n" || errs != wantErrs || code != 0 {
		t.Fatalf("out %q\nerrs %q\nwant %q\ncode %d", out, errs, wantErrs, code)
	}
}

// On a terminal the answers and a resume are tool lines; the result
// names its tool from its request when it does not itself.
func TestPrintAnswersOnTerminal(t *testing.T) {
	reply := start + `{"type":"delta","run":"R","text":"writing"}` + "\n" + approvalRequest + approvalTimeout +
		question + answered + question + unanswered + resumed + approvalRequest + approvalAllowed + doneOK
	out, _, code := printWith(t, reply, waitingPrinter(true))
	want := "writing\n" +
		"✗ fs.write denied (timeout)\n" +
		"» answered: main\n" +
		"» no answer (timeout)\n" +
		"… run R resumed after the server restarted\n" +
		"✓ fs.write allowed once\n"
	if out != want || code != 0 {
		t.Fatalf("out %q\nwant %q\ncode %d", out, want, code)
	}
}

// Answer is offered each request first; what it answers is not shown,
// what it leaves is.
func TestPrintOffersRequestsToAnswer(t *testing.T) {
	p := waitingPrinter(false)
	var offered []string
	p.Answer = func(o *proto.Object) bool {
		offered = append(offered, o.Str("type"))
		return o.Str("type") == proto.FrameApprovalRequest
	}
	_, errs, _ := printWith(t, start+approvalRequest+question+doneOK, p)
	if strings.Join(offered, " ") != "approval_request question" || strings.Contains(errs, "approve") || !strings.Contains(errs, "ctx agent answer coder R") {
		t.Fatalf("offered %v, errs %q", offered, errs)
	}
}

// --json passes the frames through and shows no hint, but --approve
// still answers.
func TestPrintJSONRequests(t *testing.T) {
	p := NewSendPrinter(nil, nil, true, nil)
	asked := 0
	p.Answer = func(*proto.Object) bool { asked++; return false }
	reply := start + approvalRequest + approvalAllowed + question + doneOK
	out, errs, code := printWith(t, reply, p)
	if out != reply || errs != "" || code != 0 || asked != 2 {
		t.Fatalf("out %q errs %q code %d asked %d", out, errs, code, asked)
	}
}
