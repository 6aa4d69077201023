package inspect

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/proto"
)

func Status(e *clienv.Env, p *clienv.Parsed) int {
	return sessionOp(e, p, "status", proto.OpStatus, proto.FrameStatus, printStatus)
}

// sessionOp sends op for the session p names and prints its one reply
// frame (want) with print, or as it came with --json.
func sessionOp(e *clienv.Env, p *clienv.Parsed, name, op, want string, print func(io.Writer, *proto.Object)) int {
	w, err := clienv.Resolve(e, p, p.Args[0])
	if err != nil {
		return clienv.Fail(e, name, err, clienv.ExitFailed)
	}
	req := proto.NewObject("op", op, "session", w.Session, "scope", w.Scope)
	if w.Scope == abi.ScopeShared {
		req.Set("space", w.Loc.Space)
	}
	f, err := clienv.Call(e, w, req, want)
	if err == context.Canceled {
		return clienv.ExitInterrupted
	}
	if err != nil {
		return clienv.Fail(e, name, err, clienv.ExitFailed)
	}
	if p.On("json") {
		e.Stdout.Write(append(f.Line, '\n'))
	} else {
		print(e.Stdout, f.Obj)
	}
	return clienv.ExitOK
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
	var win struct {
		Tokens, Limit, Window int
		CompactAt             int `json:"compact_at"`
	}
	if json.Unmarshal(o.Raw("window"), &win) == nil && win.Limit > 0 { // SPEC 18: a model API's agent
		fmt.Fprintf(w, "window: %d of %d tokens (%d%%), compacts at %d; the model's window %d, less the reply's reserve\n",
			win.Tokens, win.Limit, 100*win.Tokens/win.Limit, win.CompactAt, win.Window)
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
