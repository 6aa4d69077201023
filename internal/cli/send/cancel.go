package send

import (
	"context"
	"fmt"
	"strconv"

	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/proto"
)

// Cancel cancels one run: exit 0 when it was cancelled, 1 when it was
// not running (stale), 2 when refused.
func Cancel(e *clienv.Env, p *clienv.Parsed) int {
	w, err := clienv.ResolveLoc(e, p, p.Args[0])
	if err != nil {
		return clienv.Fail(e, "cancel", err, clienv.ExitFailed)
	}
	id := p.Args[1]
	req := proto.NewObject("op", proto.OpCancel, "id", id)
	w.SetScope(req)
	f, err := clienv.Call(e, w, req, proto.FrameCancel)
	if err == context.Canceled {
		return clienv.ExitInterrupted
	}
	if err != nil {
		return clienv.Fail(e, "cancel", err, clienv.ExitFailed)
	}
	run := f.Obj.Str("run")
	if run == "" {
		run = id
	}
	cancelled, _ := strconv.ParseBool(string(f.Obj.Raw("cancelled")))
	switch {
	case p.On("json"):
		e.Stdout.Write(append(f.Line, '\n'))
	case cancelled:
		fmt.Fprintf(e.Stdout, "cancelled %s\n", run)
	default:
		fmt.Fprintf(e.Stdout, "not running: %s (stale)\n", run)
	}
	if !cancelled {
		return clienv.ExitFailed
	}
	return clienv.ExitOK
}
