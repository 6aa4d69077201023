package send

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/internal/cli/approval"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/proto"
)

const AttachHelp = `Follows a run again after Ctrl+C detached its send (resume is another name
for it): the frames the run has recorded so far, then the rest as it streams,
each once, printed as send prints them (--json: the raw frames). RUN is a run
id (ctx-…); without it, the run active in the session. A run that has ended
is printed whole. Exit status as send: 0 ok, 1 the run failed or was
cancelled, or the connection fell too far behind a fast run (the run goes
on; the message names the attach that follows it again), 2 a refused
request, 130 Ctrl+C (which detaches again).
Text that an agent streamed before you attached is not shown again; the
messages it recorded are (ctx agent output shows the latest one whole).
`

func Attach(e *clienv.Env, p *clienv.Parsed) int {
	w, err := clienv.Resolve(e, p, p.Args[0])
	if err != nil {
		return clienv.Fail(e, "attach", err, clienv.ExitUsage)
	}
	run := ""
	if len(p.Args) > 1 {
		if run = p.Args[1]; !abi.IsRunID(run) {
			return clienv.UsageError(e, "attach", fmt.Sprintf("%q is not a run id (ctx- and 32 hex digits; ctx agent runs %s lists them)", run, w.Loc.Agent))
		}
	} else if run, err = activeRun(e, w); err != nil {
		if err == context.Canceled {
			return clienv.ExitInterrupted
		}
		if _, ok := err.(activeRunError); ok {
			fmt.Fprintf(e.Stderr, "ctx: attach: %s\n", err)
			return clienv.ExitFailed
		}
		return clienv.Fail(e, "attach", err, clienv.ExitUsage) // a refusal, or no server: as send
	}
	pr := newPrinter(e, w, "attach", p.On("json"))
	pr.Run = run // named before its start frame comes: see interrupted and fellBehind
	// The record holds requests answered long ago: only one that still
	// waits gets the command that answers it.
	pr.Answer = func(o *proto.Object) bool { return !approval.Waits(e, w, o) }
	f := &runFilter{run: run, pr: pr}
	code, explained := streamFrames(e, w, resumeRequest(w), pr, f.frame)
	if explained {
		return code
	}
	if se := f.refusal(); se != nil {
		pr.refused = se
		return pr.ExitStatus(nil)
	}
	fmt.Fprintf(e.Stderr, "ctx: attach: ENOENT: no run %s in session %s (ctx agent runs %s lists its runs)\n", run, w.Session, w.Loc.Agent)
	return clienv.ExitFailed
}

// resumeRequest asks for the session's recorded events, then the live
// frames of its active runs (SPEC section 7). Without "after" it is all of
// the record: the run's own frames are picked from it (runFilter), because
// "after" cuts after a run's last line, and lines of runs that overlap
// interleave.
func resumeRequest(w *clienv.Where) *proto.Object {
	req := proto.NewObject("op", proto.OpResume, "session", w.Session, "scope", w.Scope)
	if w.Scope == abi.ScopeShared {
		req.Set("space", w.Loc.Space)
	}
	return req
}

// runFilter passes the frames of one run to the printer, from its start to
// its done, as its send would have received them: state events are the
// session's, not the send's, and are left out. The server sends a frame
// either from the record or live, never both (session.Engine.resume), so
// nothing is printed twice. Once the done frame is in, nothing else is
// read. A frame without a run before anything else may be the refusal of
// the request: it is kept until the reply shows whether it was one.
type runFilter struct {
	run   string
	pr    *SendPrinter
	n     int           // frames received
	first *client.Frame // the first frame, when it has no run
}

func (f *runFilter) frame(fr client.Frame) {
	f.n++
	if fr.Obj == nil || f.pr.Done != nil {
		return
	}
	if f.n == 1 && fr.Obj.Str("run") == "" {
		f.first = &fr
		return
	}
	if cutFrame(fr.Obj) { // whichever run's stream it was: the reply ends
		f.pr.cutOff(fr)
		return
	}
	t := fr.Type()
	if fr.Obj.Str("run") != f.run || t == proto.FrameState || !f.pr.started && t != proto.FrameStart {
		return
	}
	f.pr.Frame(fr)
}

// refusal is the error of a reply that was one error frame (SPEC section
// 7: a refused request), nil otherwise.
func (f *runFilter) refusal() *client.ServerError {
	if f.n != 1 || f.first == nil || f.first.Type() != proto.FrameError {
		return nil
	}
	if f.pr.json {
		f.pr.out.Write(append(f.first.Line, '\n'))
	}
	return client.FrameError(f.first.Obj)
}

// activeRunError is a session without exactly one active run.
type activeRunError string

func (e activeRunError) Error() string { return string(e) }

// activeRun asks the server which run is active in the session: there must
// be exactly one (queued or running) to attach to without naming it.
func activeRun(e *clienv.Env, w *clienv.Where) (string, error) {
	req := proto.NewObject("op", proto.OpStatus, "session", w.Session, "scope", w.Scope)
	if w.Scope == abi.ScopeShared {
		req.Set("space", w.Loc.Space)
	}
	f, err := clienv.Call(e, w, req, proto.FrameStatus)
	if err != nil {
		return "", err
	}
	var runs []struct{ Run, Phase string }
	json.Unmarshal(f.Obj.Raw("runs"), &runs)
	var ids []string
	for _, r := range runs {
		if abi.IsRunID(r.Run) {
			ids = append(ids, r.Run)
		}
	}
	switch len(ids) {
	case 0:
		return "", activeRunError(fmt.Sprintf("no run is active in session %s", w.Session))
	case 1:
		return ids[0], nil
	}
	return "", activeRunError(fmt.Sprintf("%d runs are active in session %s: %s; name one (ctx agent attach %s RUN)",
		len(ids), w.Session, strings.Join(ids, " "), w.Loc.Agent))
}
