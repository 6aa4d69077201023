package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/proto"
)

// call sends one short request to the agent's socket and returns its one
// answer frame of type want. A refusal, an unreachable server or any other
// answer is returned as an error.
func call(e *env, w *where, req *proto.Object, want string) (client.Frame, error) {
	ctx, stop := e.interrupt()
	defer stop()
	frames, err := client.Call(ctx, w.loc.Socket(), req)
	if ctx.Err() != nil {
		return client.Frame{}, context.Canceled
	}
	if err != nil {
		return client.Frame{}, err
	}
	if se := client.Refusal(frames); se != nil {
		return client.Frame{}, se
	}
	for _, f := range frames {
		if f.Type() == want {
			return f, nil
		}
	}
	return client.Frame{}, abi.Errorf(syscall.EIO, "", "the server sent no %s frame", want)
}

func runStatus(e *env, p *parsed) int {
	w, err := resolve(e, p, p.args[0])
	if err != nil {
		return fail(e, "status", err, exitFailed)
	}
	req := proto.NewObject("op", proto.OpStatus, "session", w.session, "scope", w.scope)
	if w.scope == abi.ScopeShared {
		req.Set("space", w.loc.Space)
	}
	f, err := call(e, w, req, proto.FrameStatus)
	if err == context.Canceled {
		return exitInterrupted
	}
	if err != nil {
		return fail(e, "status", err, exitFailed)
	}
	if p.on("json") {
		e.stdout.Write(append(f.Line, '\n'))
	} else {
		printStatus(e.stdout, f.Obj)
	}
	return exitOK
}

// printStatus writes a status frame as "key: value" lines, one run a line.
func printStatus(w io.Writer, o *proto.Object) {
	fmt.Fprintf(w, "session: %s\n", o.Str("session"))
	fmt.Fprintf(w, "state: %s\n", o.Str("state"))
	fmt.Fprintf(w, "updated_at: %s\n", unixTime(o.Raw("updated_at")))
	var runs []struct{ Run, Phase string }
	json.Unmarshal(o.Raw("runs"), &runs)
	if len(runs) == 0 {
		fmt.Fprintln(w, "runs: none")
	}
	for _, r := range runs {
		fmt.Fprintf(w, "run: %s %s\n", r.Run, r.Phase)
	}
}

// unixTime shows Unix seconds with the UTC time beside them; "-" when the
// session has none (a missing session reports idle without a time).
func unixTime(raw json.RawMessage) string {
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || n <= 0 {
		return "-"
	}
	return fmt.Sprintf("%d (%s)", n, time.Unix(n, 0).UTC().Format(time.RFC3339))
}

// runCancel cancels one run: exit 0 when it was cancelled, 1 when it was
// not running (stale), 2 when refused.
func runCancel(e *env, p *parsed) int {
	w, err := resolveLoc(e, p, p.args[0])
	if err != nil {
		return fail(e, "cancel", err, exitFailed)
	}
	id := p.args[1]
	f, err := call(e, w, proto.NewObject("op", proto.OpCancel, "id", id), proto.FrameCancel)
	if err == context.Canceled {
		return exitInterrupted
	}
	if err != nil {
		return fail(e, "cancel", err, exitFailed)
	}
	run := f.Obj.Str("run")
	if run == "" {
		run = id
	}
	cancelled, _ := strconv.ParseBool(string(f.Obj.Raw("cancelled")))
	switch {
	case p.on("json"):
		e.stdout.Write(append(f.Line, '\n'))
	case cancelled:
		fmt.Fprintf(e.stdout, "cancelled %s\n", run)
	default:
		fmt.Fprintf(e.stdout, "not running: %s (stale)\n", run)
	}
	if !cancelled {
		return exitFailed
	}
	return exitOK
}
