package sessions

import (
	"context"
	"encoding/json"
	"strconv"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/proto"
)

// requestRoom is what of abi.MaxRequestBytes one archivable request
// gives its names: the rest is room for the other fields.
const requestRoom = abi.MaxRequestBytes - 4096

// archivable asks the server which of names (sessions of the job's
// agent, in the order given) it would archive now, with op archivable:
// one request for all of them, or more when they do not fit one
// (proto.MaxArchivableSessions, requestRoom). each gets every name the
// server would take, as its answer streams; prog shows how many were
// answered (on a terminal). A protected session (EBUSY) is
// left out; any other refusal of a session, or of a request, ends the
// questions with that error, as a single dry run of it would.
func (j *gcJob) archivable(names []string, prog *clienv.Progress, each func(name string)) error {
	checked := 0
	for len(names) > 0 {
		n := fitting(names)
		a := &archivableAnswer{asked: n, take: each, prog: prog, checked: &checked}
		if err := j.askArchivable(names[:n], a); err != nil {
			return err
		}
		names = names[n:]
	}
	return nil
}

// fitting is how many of the first names one request carries.
func fitting(names []string) int {
	size := 0
	for i, n := range names {
		b, _ := json.Marshal(n)
		size += len(b) + 1
		if i == proto.MaxArchivableSessions || size > requestRoom {
			return max(i, 1)
		}
	}
	return len(names)
}

// askArchivable sends one archivable request for names and reads its
// answer to the end.
func (j *gcJob) askArchivable(names []string, a *archivableAnswer) error {
	req := proto.NewObject("op", proto.OpArchivable, "scope", j.w.Scope, "sessions", names)
	if j.w.Scope == abi.ScopeShared {
		req.Set("space", j.w.Loc.Space)
	}
	ctx, stop := j.e.Interrupt()
	defer stop()
	sendErr, readErr, err := clienv.Exchange(ctx, j.w, req, a.frame)
	switch {
	case ctx.Err() != nil:
		return context.Canceled
	case err != nil:
		return err
	case a.err != nil:
		return a.err
	case !a.ended:
		return clienv.NoReply(sendErr, readErr)
	}
	return nil
}

// archivableAnswer reads the frames of one archivable answer.
type archivableAnswer struct {
	asked   int // names in the request
	take    func(string)
	prog    *clienv.Progress
	checked *int  // sessions answered, this request's and those before
	err     error // the first refusal: the rest of the answer is not used
	ended   bool  // the checked frame came
}

func (a *archivableAnswer) frame(f client.Frame) {
	if a.err != nil || a.ended {
		return
	}
	switch f.Type() {
	case proto.FrameArchivable:
		var names []string
		if err := json.Unmarshal(f.Obj.Raw("sessions"), &names); err != nil {
			a.unexpected(f)
			return
		}
		for _, n := range names {
			a.take(n)
			a.answered()
		}
	case proto.FrameKept:
		a.answered()
		if se := client.FrameError(f.Obj); se.Errno() != syscall.EBUSY {
			a.err = se // as the dry run of that one session would have failed
		}
	case proto.FrameChecked:
		a.ended = true
		if n, err := strconv.Atoi(string(f.Obj.Raw("sessions"))); err != nil || n != a.asked {
			a.unexpected(f)
		}
	case proto.FrameError:
		a.err = client.FrameError(f.Obj)
	default:
		a.unexpected(f)
	}
}

// unexpected ends the answer at a frame it cannot read: EIO.
func (a *archivableAnswer) unexpected(f client.Frame) {
	a.err = abi.Errorf(syscall.EIO, "", "the server answered archivable with %q", clienv.FirstLine(string(f.Line), 80))
}

func (a *archivableAnswer) answered() {
	*a.checked++
	a.prog.Show(*a.checked - 1)
}
