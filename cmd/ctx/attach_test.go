package main

import (
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/proto"
)

const (
	runA = "ctx-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	runB = "ctx-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// resumeReply is what a resume of a session with a finished run A and a
// run B still going sends: A's record, B's record so far, then B's live
// frames, with a line of run A appended by someone in between.
var resumeReply = []string{
	`{"type":"start","id":"` + runA + `","run":"` + runA + `"}`,
	`{"type":"state","state":"active","run":"` + runA + `"}`,
	`{"type":"message","run":"` + runA + `","role":"assistant","content":[{"type":"text","text":"a1"}]}`,
	`{"type":"done","run":"` + runA + `","status":"ok"}`,
	`{"type":"done","run":"` + runB + `","status":"ok"}`, // before B's start: not B's
	`{"type":"start","id":"` + runB + `","run":"` + runB + `"}`,
	`{"type":"state","state":"active","run":"` + runB + `"}`,
	`{"type":"message","run":"` + runB + `","role":"assistant","content":[{"type":"text","text":"b1"}]}`,
	`{"type":"message","run":"` + runA + `","role":"assistant","content":[{"type":"text","text":"late a"}]}`,
	`{"type":"message","run":"` + runB + `","role":"assistant","content":[{"type":"text","text":"b2"}]}`,
	`{"type":"done","run":"` + runB + `","status":"error"}`,
	`{"type":"message","run":"` + runB + `","role":"assistant","content":[{"type":"text","text":"after done"}]}`,
}

// attachAgent answers status with the given active runs and resume with
// reply.
func attachAgent(t *testing.T, active []string, reply []string) *fakeAgent {
	return newFakeAgent(t, func(r *proto.Request) []string {
		switch r.Op {
		case proto.OpStatus:
			var runs []string
			for _, id := range active {
				runs = append(runs, `{"run":"`+id+`","phase":"running"}`)
			}
			return []string{`{"type":"status","session":"` + r.Session + `","state":"active","runs":[` + strings.Join(runs, ",") + `],"updated_at":1}`}
		case proto.OpResume:
			return reply
		}
		return []string{`{"type":"error","code":"EINVAL","message":"unexpected op"}`}
	})
}

func TestAttachActiveRun(t *testing.T) {
	a := attachAgent(t, []string{runB}, resumeReply)
	out, errs, code := ctxRun(a.root, "", "agent", "attach", "coder", "--session", "work")
	if out != "b1\nb2\n" || errs != "" || code != 1 {
		t.Fatalf("out %q errs %q code %d", out, errs, code)
	}
	if r := a.last(); r.Op != proto.OpResume || r.Session != "work" || r.After != "" {
		t.Fatalf("request %+v", r)
	}
}

// --json passes the run's frames as they came, without the session's
// state events, from its start to its done.
func TestAttachJSONOneRun(t *testing.T) {
	a := attachAgent(t, nil, resumeReply)
	out, _, code := ctxRun(a.root, "", "agent", "resume", "coder", runB, "--json")
	want := strings.Join([]string{resumeReply[5], resumeReply[7], resumeReply[9], resumeReply[10]}, "\n") + "\n"
	if out != want || code != 1 {
		t.Fatalf("out %q\nwant %q code %d", out, want, code)
	}
	out, _, code = ctxRun(a.root, "", "agent", "attach", "coder", runA)
	if out != "a1\n" || code != 0 {
		t.Fatalf("finished run A: out %q code %d", out, code)
	}
}

func TestAttachNoActiveRun(t *testing.T) {
	a := attachAgent(t, nil, nil)
	out, errs, code := ctxRun(a.root, "", "agent", "attach", "coder")
	if out != "" || errs != "ctx: attach: no run is active in session default\n" || code != 1 {
		t.Fatalf("out %q errs %q code %d", out, errs, code)
	}
	a = attachAgent(t, []string{runA, runB}, nil)
	_, errs, code = ctxRun(a.root, "", "agent", "attach", "coder")
	if code != 1 || errs != "ctx: attach: 2 runs are active in session default: "+runA+" "+runB+"; name one (ctx agent attach coder RUN)\n" {
		t.Fatalf("errs %q code %d", errs, code)
	}
}

func TestAttachUnknownRun(t *testing.T) {
	a := attachAgent(t, nil, resumeReply[:4])
	_, errs, code := ctxRun(a.root, "", "agent", "attach", "coder", runB)
	if code != 1 || errs != "ctx: attach: ENOENT: no run "+runB+" in session default (ctx agent runs coder lists its runs)\n" {
		t.Fatalf("errs %q code %d", errs, code)
	}
	_, errs, code = ctxRun(a.root, "", "agent", "attach", "coder", "run-1")
	if code != 2 || !strings.HasPrefix(errs, `ctx: attach: "run-1" is not a run id`) {
		t.Fatalf("bad id: errs %q code %d", errs, code)
	}
}

// A reply that is one error frame is a refusal (exit 2); an error line
// without a run at the top of a longer reply is only a recorded event.
func TestAttachRefusedOrNot(t *testing.T) {
	a := attachAgent(t, nil, []string{`{"type":"error","code":"ENOENT","message":"session nope: no such session"}`})
	out, errs, code := ctxRun(a.root, "", "agent", "attach", "coder", "--session", "nope", runB)
	if out != "" || errs != "ctx: attach: ENOENT: session nope: no such session\n" || code != 2 {
		t.Fatalf("out %q errs %q code %d", out, errs, code)
	}
	out, _, code = ctxRun(a.root, "", "agent", "attach", "coder", "--session", "nope", runB, "--json")
	if out != `{"type":"error","code":"ENOENT","message":"session nope: no such session"}`+"\n" || code != 2 {
		t.Fatalf("--json: out %q code %d", out, code)
	}
	a = attachAgent(t, nil, append([]string{`{"type":"error","code":"EIO","message":"appended"}`}, resumeReply...))
	out, errs, code = ctxRun(a.root, "", "agent", "attach", "coder", runB)
	if out != "b1\nb2\n" || errs != "" || code != 1 {
		t.Fatalf("out %q errs %q code %d", out, errs, code)
	}
}

// cutReply is a resume whose reader the server cut for falling behind
// (session/reply/reply.go): B's frames so far, then an EAGAIN error frame of no
// run, and the end.
var cutReply = []string{
	`{"type":"start","id":"` + runB + `","run":"` + runB + `"}`,
	`{"type":"message","run":"` + runB + `","role":"assistant","content":[{"type":"text","text":"b1"}]}`,
	`{"type":"error","code":"EAGAIN","message":"follow: EAGAIN: the reader fell more than 1048576 bytes behind the run, which goes on: resume follows it again"}`,
}

// A reply cut for falling behind says so and how to follow the run again
// (not "no done frame"); exit 1. --json prints the cut frame too.
func TestAttachCutBehind(t *testing.T) {
	a := attachAgent(t, []string{runB}, cutReply)
	want := "ctx: attach: EAGAIN: the connection fell behind run " + runB + ", which goes on: ctx agent attach coder --session work " + runB + " follows it again\n"
	out, errs, code := ctxRun(a.root, "", "agent", "attach", "coder", "--session", "work")
	if out != "b1\n" || errs != want || code != 1 {
		t.Fatalf("out %q errs %q code %d", out, errs, code)
	}
	out, errs, code = ctxRun(a.root, "", "agent", "attach", "coder", "--session", "work", "--json")
	if out != strings.Join(cutReply, "\n")+"\n" || errs != want || code != 1 {
		t.Fatalf("--json: out %q errs %q code %d", out, errs, code)
	}
}
