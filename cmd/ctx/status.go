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
func Call(e *Env, w *Where, req *proto.Object, want string) (client.Frame, error) {
	ctx, stop := e.Interrupt()
	defer stop()
	frames, err := client.Call(ctx, w.Loc.Socket(), req)
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

func runStatus(e *Env, p *Parsed) int {
	w, err := Resolve(e, p, p.Args[0])
	if err != nil {
		return Fail(e, "status", err, ExitFailed)
	}
	req := proto.NewObject("op", proto.OpStatus, "session", w.Session, "scope", w.Scope)
	if w.Scope == abi.ScopeShared {
		req.Set("space", w.Loc.Space)
	}
	f, err := Call(e, w, req, proto.FrameStatus)
	if err == context.Canceled {
		return ExitInterrupted
	}
	if err != nil {
		return Fail(e, "status", err, ExitFailed)
	}
	if p.On("json") {
		e.Stdout.Write(append(f.Line, '\n'))
	} else {
		printStatus(e.Stdout, f.Obj)
	}
	return ExitOK
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
func runCancel(e *Env, p *Parsed) int {
	w, err := ResolveLoc(e, p, p.Args[0])
	if err != nil {
		return Fail(e, "cancel", err, ExitFailed)
	}
	id := p.Args[1]
	f, err := Call(e, w, proto.NewObject("op", proto.OpCancel, "id", id), proto.FrameCancel)
	if err == context.Canceled {
		return ExitInterrupted
	}
	if err != nil {
		return Fail(e, "cancel", err, ExitFailed)
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
		return ExitFailed
	}
	return ExitOK
}
