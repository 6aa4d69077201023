package approval

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/internal/cli/transcript"
	"github.com/ctxfs/ctxfs/proto"
)

const PendingHelp = `Lists the tool calls that wait for your answer: approvals of calls of runs
whose agent has approval ask, and questions their ask_user tool asked, in
your sessions (and in shared sessions, the runs you started), oldest first.
Without AGENT, every agent under $CTX_ROOT/agent. Columns: AGENT SESSION RUN
CALL KIND NAME WHAT (the call's arguments or the question, cut); on a
terminal aligned under a header, else tab-separated. A shared session shows
as SPACE/SESSION (answer its calls with --shared SPACE). --json: the server's pending frames, one a line. ctx agent
approve or ctx agent answer answers one. Exit status: 0, 1 when an agent's
socket failed to answer (the others are listed), 2 bad usage or no server.
`

// pendingCall is one pending frame: a call that waits for the caller.
type pendingCall struct {
	f client.Frame
	o *proto.Object
}

// Pending is `ctx agent pending [AGENT]`.
func Pending(e *clienv.Env, p *clienv.Parsed) int {
	root := abi.RootFromEnv(e.Getenv)
	names := p.Args
	if len(names) == 0 {
		all, err := agentSockets(root)
		if err != nil {
			return clienv.Fail(e, "pending", err, clienv.ExitFailed)
		}
		names = all
	}
	var calls []pendingCall
	code := clienv.ExitOK
	for _, name := range names {
		w, err := clienv.ResolveLoc(e, p, name)
		var got []pendingCall
		if err == nil {
			got, err = pendingAt(e, w, p.Str("session"))
		}
		if err == context.Canceled {
			return clienv.ExitInterrupted
		}
		if err != nil {
			if len(p.Args) > 0 || serverDown(err) {
				return clienv.Fail(e, "pending", err, clienv.ExitFailed)
			}
			fmt.Fprintf(e.Stderr, "ctx: pending: %s: %s\n", name, clienv.Describe("pending", err))
			code = clienv.ExitFailed
			continue
		}
		calls = append(calls, got...)
	}
	sort.SliceStable(calls, func(i, j int) bool { return calls[i].o.Str("since") < calls[j].o.Str("since") })
	if p.On("json") {
		for _, c := range calls {
			e.Stdout.Write(append(c.f.Line[:len(c.f.Line):len(c.f.Line)], '\n'))
		}
	} else {
		printPending(e.Stdout, calls)
	}
	return code
}

// agentSockets names the agents whose sockets are under root/agent: the
// models have no tools, so no call of theirs waits.
func agentSockets(root string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(root, abi.KindAgent))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, d := range entries {
		name, ok := strings.CutSuffix(d.Name(), abi.SocketSuffix)
		if ok && abi.ValidName(name) && d.Type()&fs.ModeSocket != 0 {
			names = append(names, name)
		}
	}
	return names, nil
}

// serverDown reports an error that every other socket would give too.
func serverDown(err error) bool {
	var de *client.DialError
	return errors.As(err, &de) && de.ServerDown()
}

// pendingAt asks one agent's socket for the calls waiting for the caller
// (in session of w's scope, when one is named).
// The reply must end with pending_end, whose count is the number of
// pending frames: anything else is a reply cut short (EIO).
func pendingAt(e *clienv.Env, w *clienv.Where, session string) ([]pendingCall, error) {
	req := proto.NewObject("op", proto.OpPending)
	if session != "" { // the session of w's scope
		req.Set("session", session)
		w.SetScope(req)
	}
	ctx, stop := e.Interrupt()
	defer stop()
	frames, err := client.Call(ctx, w.Loc.Socket(), req)
	if ctx.Err() != nil {
		return nil, context.Canceled
	}
	if err != nil {
		return nil, err
	}
	if se := client.Refusal(frames); se != nil {
		return nil, se
	}
	var calls []pendingCall
	for _, f := range frames {
		switch f.Type() {
		case proto.FramePending:
			calls = append(calls, pendingCall{f: f, o: f.Obj})
		case proto.FramePendingEnd:
			if n, _ := strconv.Atoi(string(f.Obj.Raw("count"))); n != len(calls) {
				return nil, abi.Errorf(syscall.EIO, "", "the server counted %d waiting calls and sent %d", n, len(calls))
			}
			return calls, nil
		}
	}
	return nil, abi.Errorf(syscall.EIO, "", "the server's reply ended without pending_end")
}

// Waits reports whether the call the request o asks about still waits
// for the caller (a request replayed from a session's record may have
// been answered long ago); false too when the server cannot tell.
func Waits(e *clienv.Env, w *clienv.Where, o *proto.Object) bool {
	calls, err := pendingAt(e, w, w.Session)
	if err != nil {
		return false
	}
	for _, c := range calls {
		if c.o.Str("run") == o.Str("run") && c.o.Str("id") == o.Str("id") {
			return true
		}
	}
	return false
}

// printPending writes one line per waiting call: aligned under a header
// on a terminal, tab-separated for pipelines.
func printPending(w io.Writer, calls []pendingCall) {
	out := w
	var tw *tabwriter.Writer
	if clienv.IsTerminal(w) {
		if len(calls) == 0 {
			fmt.Fprintln(w, "no call waits for your answer")
			return
		}
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		out = tw
		fmt.Fprintln(tw, "AGENT\tSESSION\tRUN\tCALL\tKIND\tNAME\tWHAT")
	}
	for _, c := range calls {
		o := c.o
		fmt.Fprintf(out, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", clienv.Printable(o.Str("agent")), clienv.Printable(sessionOf(o)),
			clienv.Printable(o.Str("run")), clienv.Printable(o.Str("id")), clienv.Printable(o.Str("kind")),
			orDash(clienv.Printable(o.Str("name"))), orDash(What(o)))
	}
	if tw != nil {
		tw.Flush()
	}
}

// sessionOf is the session a pending frame names: SPACE/SESSION for a
// shared one.
func sessionOf(o *proto.Object) string {
	if o.Str("scope") == abi.ScopeShared && o.Str("space") != "" {
		return o.Str("space") + "/" + o.Str("session")
	}
	return o.Str("session")
}

// What is the short form of what a waiting call asks: an approval's
// arguments as compact JSON, or a question's text, on one line and cut.
func What(o *proto.Object) string {
	s := o.Str("text")
	if args := o.Raw("arguments"); args != nil {
		s = transcript.Compact(args)
	}
	return clienv.Printable(abi.Clip(s, maxShown))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
