package send

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/internal/cli/approval"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/proto"
	"golang.org/x/term"
)

func Send(e *clienv.Env, p *clienv.Parsed) int {
	w, err := clienv.Resolve(e, p, p.Args[0])
	if err != nil {
		return clienv.Fail(e, "send", err, clienv.ExitUsage)
	}
	input, err := readInput(e.Stdin, p.Args[1:])
	if err == nil && input == "" { // as the server would: nothing is sent
		err = abi.Errorf(syscall.EINVAL, "", "the input is empty: nothing to send")
	}
	if err != nil {
		return clienv.Fail(e, "send", err, clienv.ExitUsage)
	}
	id := p.Str("id")
	if id == "" {
		id = client.NewClientID()
	}
	pr := newPrinter(e, w, "send", p.On("json"))
	pr.Answer = approval.NewAuto(e, w, "send", p.All("approve")).Handle
	return stream(e, w, SendRequest(w, p, id, input), pr)
}

// newPrinter is the printer of send and attach: what a replay lacks is read
// from the session's files (a temp session has none), and a terminal gets
// the run id and the tool lines that a pipe does not.
func newPrinter(e *clienv.Env, w *clienv.Where, cmd string, json bool) *SendPrinter {
	var recorded func(string) string
	if w.Scope != abi.ScopeTemp {
		recorded = func(run string) string { return RecordedText(w, run) }
	}
	pr := NewSendPrinter(e.Stdout, e.Stderr, json, recorded)
	pr.cmd, pr.Where = cmd, w
	if w.Scope != abi.ScopeTemp {
		pr.recordedLog = func(run string, n int) []string { return recordedStderr(w, run, n) }
	}
	if clienv.IsTerminal(e.Stderr) {
		pr.announce = e.Stderr
	}
	pr.ShowTools(e)
	return pr
}

// ShowTools has the printer show tool calls and results as one line each
// when stdout is a terminal (send, attach and chat alike).
func (p *SendPrinter) ShowTools(e *clienv.Env) {
	if clienv.IsTerminal(e.Stdout) {
		p.tools, p.width = true, termWidth(e.Stdout)
	}
}

// defaultWidth is the width of tool lines when the terminal's is unknown.
const defaultWidth = 120

// termWidth is the width of the terminal w, or defaultWidth.
func termWidth(w io.Writer) int {
	if f, ok := w.(*os.File); ok {
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 0 {
			return cols
		}
	}
	return defaultWidth
}

// SendRequest builds the request; space and cwd are sent only when given,
// because the server refuses a space outside scope shared.
func SendRequest(w *clienv.Where, p *clienv.Parsed, id, input string) *proto.Object {
	req := proto.NewObject("op", proto.OpSend, "id", id, "session", w.Session, "scope", w.Scope)
	if w.Scope == abi.ScopeShared {
		req.Set("space", w.Loc.Space)
	}
	if cwd, ok := p.Vals["cwd"]; ok {
		req.Set("cwd", cwd)
	}
	req.Set("input", input)
	return req
}

// stream sends req and prints its reply. On SIGINT it only detaches: the
// run goes on (SPEC section 7), and the message says how to follow it
// again and how to stop it.
func stream(e *clienv.Env, w *clienv.Where, req *proto.Object, pr *SendPrinter) int {
	code, _ := streamFrames(e, w, req, pr, pr.Frame)
	return code
}

// streamFrames is stream with each frame handed to each (which hands what
// it keeps to pr). It returns -1 and false when the reply ended cleanly
// without a start or a refusal, for the caller to explain.
func streamFrames(e *clienv.Env, w *clienv.Where, req *proto.Object, pr *SendPrinter, each func(client.Frame)) (int, bool) {
	ctx, stop := e.Interrupt()
	defer stop()
	// The reply is read until the run's done frame: a resume's reply goes
	// on with the live frames of other runs, which no one here wants.
	rctx, enough := context.WithCancel(ctx)
	defer enough()
	sendErr, readErr, err := clienv.Exchange(rctx, w, req, func(f client.Frame) {
		if each(f); pr.Done != nil {
			enough()
		}
	})
	if err != nil {
		return clienv.Fail(e, pr.cmd, err, clienv.ExitUsage), true
	}
	pr.Finish()
	if ctx.Err() != nil {
		return interrupted(e, w, pr), true
	}
	if pr.Cut && pr.Done == nil {
		return FellBehind(e, w, pr), true
	}
	if code := pr.ExitStatus(readErr); code >= 0 {
		return code, true
	}
	if sendErr == nil && readErr == nil {
		return -1, false
	}
	return clienv.Fail(e, pr.cmd, clienv.NoReply(sendErr, readErr), clienv.ExitUsage), true
}

// interrupted reports a Ctrl+C that detached from a run: the run goes
// on, and the message says how to follow it again and how to stop it.
func interrupted(e *clienv.Env, w *clienv.Where, pr *SendPrinter) int {
	if pr.Run == "" {
		fmt.Fprintf(e.Stderr, "ctx: %s: interrupted\n", pr.cmd)
	} else {
		fmt.Fprintf(e.Stderr, "ctx: %s: interrupted; run %s goes on: %s follows it again, ctx agent cancel %s%s %s stops it\n",
			pr.cmd, pr.Run, attachCommand(w, pr.Run), w.Loc.Agent, w.ScopeFlags(), pr.Run)
	}
	return clienv.ExitInterrupted
}

// FellBehind reports a reply the server cut because this process read
// it too slowly (over a MiB of frames behind the run): the run goes on,
// and attach follows it again from its record.
func FellBehind(e *clienv.Env, w *clienv.Where, pr *SendPrinter) int {
	fmt.Fprintf(e.Stderr, "ctx: %s: EAGAIN: the connection fell behind run %s, which goes on: %s follows it again\n",
		pr.cmd, pr.Run, attachCommand(w, pr.Run))
	return clienv.ExitFailed
}

// attachCommand is the command line that attaches to run again. Agent,
// session and space are checked names, which need no shell quoting.
func attachCommand(w *clienv.Where, run string) string {
	return "ctx agent attach " + w.Loc.Agent + " --session " + w.Session + w.ScopeFlags() + " " + run
}

// readInput joins the INPUT words with spaces; a word "-" is replaced by
// all of stdin, kept byte for byte (a diff's final newline matters).
func readInput(stdin io.Reader, words []string) (string, error) {
	out := make([]string, len(words))
	usedStdin := false
	for i, w := range words {
		if w != "-" {
			out[i] = w
			continue
		}
		if usedStdin {
			return "", clienv.BadUsage("only one INPUT may be - (stdin)")
		}
		usedStdin = true
		b, err := io.ReadAll(stdin)
		if err != nil {
			return "", fmt.Errorf("read stdin: %w", err)
		}
		out[i] = string(b)
	}
	return strings.Join(out, " "), nil
}

// RecordedText is the assistant text run recorded in the session, or "" if
// it cannot be read (the send already succeeded; this is only its echo).
func RecordedText(w *clienv.Where, run string) string {
	f, err := os.Open(w.Loc.SessionFile(w.Session, abi.FileMessages))
	if err != nil {
		return ""
	}
	defer f.Close()
	s, err := client.RunText(f, run)
	if err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	return s
}

// recordedStderr is the last n lines of run's stderr recorded in the
// session's events.jsonl, or none if it cannot be read (the run's failure
// is already reported; this only adds its reason).
func recordedStderr(w *clienv.Where, run string, n int) []string {
	f, err := os.Open(w.Loc.SessionFile(w.Session, abi.FileEvents))
	if err != nil {
		return nil
	}
	defer f.Close()
	lines, _ := client.RunStderr(f, run, n)
	return lines
}
