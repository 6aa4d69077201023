package send

import (
	"encoding/json"
	"fmt"
	"io"
	"syscall"
	"unicode/utf8"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/internal/cli/transcript"
	"github.com/ctxfs/ctxfs/proto"
)

// Per-run text sources: a run's text is printed from its deltas or from its
// message frames, whichever comes first, never both, because an agent that
// streams deltas usually sends the whole message again at the end.
const (
	srcDelta   = "delta"
	srcMessage = "message"
)

// SendPrinter turns the reply frames of one send into what a person reads
// (or, with --json, passes them through) and remembers how the send ended.
type SendPrinter struct {
	out, errw io.Writer
	json      bool
	// recorded returns the assistant text recorded for a run. A replay
	// returns only start and done (SPEC section 8), so a run that printed
	// nothing gets its text from the session's messages.jsonl.
	recorded func(run string) string

	// cmd names the command in messages ("send", "attach").
	cmd string
	// tools shows tool calls and results as one line each, at most width
	// columns: only on a terminal, so that pipes keep just the text.
	tools bool
	width int
	// announce is where the run id goes when the start frame names it
	// (stderr, when it is a terminal), nil for nowhere.
	announce io.Writer
	// recordedLog returns the last lines of a run's stderr as recorded in
	// the session, for a failed run whose reply carried none of them (a
	// replay has only start and done); nil for a temp session.
	recordedLog func(run string, n int) []string
	// Where is the session of the run, for the command lines shown beside
	// a request that waits for an answer (ctx agent approve AGENT …).
	Where *clienv.Where
	// Answer is offered each approval_request and question frame first
	// (--approve TOOL, chat's questions on the terminal); it reports
	// whether it answered. Requests it leaves are shown on stderr with
	// the command that answers them. Nil: none is answered here.
	Answer func(*proto.Object) bool

	source    map[string]string // run -> srcDelta or srcMessage
	Run       string            // the run of the start frame
	started   bool
	body      int               // frames of the run between start and done
	stderr    []string          // the last stderrShown lines of the agent's stderr
	toolNames map[string]string // tool call id -> tool name, for result lines
	Done      *proto.Object
	refused   *client.ServerError
	Cut       bool // the server cut this connection for falling behind (cutFrame)
	last      byte // last byte of text written to out, 0 before any
}

// stderrShown is how many of its last stderr lines a failed run shows.
const stderrShown = 5

// NewSendPrinter prints to out and errw; on a terminal, the text the
// frames carry (a model's, a program's, an error message) goes through
// clienv.TerminalText, so that none of it commands the terminal. --json
// lines go to out as they came.
func NewSendPrinter(out, errw io.Writer, json bool, recorded func(string) string) *SendPrinter {
	if !json {
		out = clienv.ForTerminal(out)
	}
	return &SendPrinter{out: out, errw: clienv.ForTerminal(errw), json: json, recorded: recorded, cmd: "send",
		source: map[string]string{}, toolNames: map[string]string{}}
}

// Frame handles one reply frame.
func (p *SendPrinter) Frame(f client.Frame) {
	if p.started && cutFrame(f.Obj) {
		p.cutOff(f)
		return
	}
	if p.json {
		p.out.Write(append(f.Line[:len(f.Line):len(f.Line)], '\n'))
	}
	if f.Obj == nil {
		if !p.json {
			fmt.Fprintf(p.errw, "ctx: %s: bad frame from server: %v\n", p.cmd, f.Err)
		}
		return
	}
	o := f.Obj
	switch t := f.Type(); t {
	case proto.FrameStart:
		p.started, p.Run = true, o.Str("run")
		if p.announce != nil && !p.json {
			fmt.Fprintf(p.announce, "run %s\n", clienv.Printable(p.Run))
		}
	case proto.FrameDone:
		p.finishRun(o)
	default:
		p.body++
		p.bodyFrame(t, o)
	}
}

// bodyFrame handles a frame of a run between its start and its done.
func (p *SendPrinter) bodyFrame(t string, o *proto.Object) {
	switch t {
	case proto.FrameDelta:
		p.text(o.Str("run"), srcDelta, o.Str("text"))
	case proto.FrameMessage:
		if role := o.Str("role"); role == "" || role == "assistant" {
			p.text(o.Str("run"), srcMessage, client.MessageText(o))
		}
	case proto.FrameToolCall:
		p.toolNames[o.Str("id")] = o.Str("name")
		p.toolLine(toolCallLine(o))
	case proto.FrameToolResult:
		p.toolLine(toolResultLine(o, p.toolNames[o.Str("tool_call_id")]))
	case proto.FrameApprovalRequest, proto.FrameQuestion:
		p.request(t, o)
	case proto.FrameApprovalResult, proto.FrameAnswer, proto.FrameResumed:
		p.toolLine(answeredLine(t, o, p.toolNames[o.Str("id")]))
	case proto.FrameLog:
		p.keepStderr(o)
	case proto.FrameError:
		p.errorFrame(o)
	}
}

// text prints s for run if run's text comes from src.
func (p *SendPrinter) text(run, src, s string) {
	if p.json || s == "" {
		return
	}
	if have := p.source[run]; have != "" && have != src {
		return
	}
	if p.source[run] == srcMessage && p.last != '\n' {
		p.write("\n") // separate messages of one run, as Text separates parts
	}
	p.source[run] = src
	p.write(s)
}

func (p *SendPrinter) write(s string) {
	io.WriteString(p.out, s) // unbuffered: the writer is the terminal or a pipe
	p.last = s[len(s)-1]
}

// errorFrame: before start it is the refusal of the request; during a run it
// is reported but the done frame decides the exit status.
func (p *SendPrinter) errorFrame(o *proto.Object) {
	se := client.FrameError(o)
	if !p.started {
		p.refused = se
		return
	}
	if !p.json {
		p.endLine()
		fmt.Fprintf(p.errw, "ctx: error: %s\n", se)
	}
}

// toolLine prints one tool call or result on a line of its own, cut to
// the terminal's width.
func (p *SendPrinter) toolLine(line string) {
	if !p.tools || p.json {
		return
	}
	p.endLine()
	p.write(cutColumns(line, p.width) + "\n")
}

// cutFrame reports whether o ends a reply whose reader fell too far
// behind the run (session/reply/reply.go: an EAGAIN error frame of no run,
// after the reply's first frame; as the first, EAGAIN is a refusal).
func cutFrame(o *proto.Object) bool {
	return o != nil && o.Str("run") == "" && proto.FrameErrno(o) == syscall.EAGAIN
}

// cutOff takes the frame that cut the reply: --json prints it, and the
// end says how to follow the run again (fellBehind).
func (p *SendPrinter) cutOff(f client.Frame) {
	p.Cut = true
	if p.json {
		p.out.Write(append(f.Line[:len(f.Line):len(f.Line)], '\n'))
	}
}

// endLine ends the text's line on a terminal before a line of another
// kind (a tool line, an error on stderr) is written there. A pipe gets no
// newline that was not in the text until the end (finish).
func (p *SendPrinter) endLine() {
	if p.tools && p.last != 0 && p.last != '\n' {
		p.write("\n")
	}
}

// keepStderr keeps the last stderrShown lines the agent wrote on stderr.
func (p *SendPrinter) keepStderr(o *proto.Object) {
	if o.Str("stream") != "stderr" {
		return
	}
	p.stderr = append(p.stderr, o.Str("text"))
	if len(p.stderr) > stderrShown {
		p.stderr = p.stderr[1:]
	}
}

func (p *SendPrinter) finishRun(o *proto.Object) {
	p.Done = o
	run := o.Str("run")
	if p.json || p.source[run] != "" || p.recorded == nil {
		return
	}
	if s := p.recorded(run); s != "" {
		p.source[run] = srcMessage
		p.write(s)
	}
}

// Finish ends the text with a newline if it did not end with one.
func (p *SendPrinter) Finish() {
	if p.last != 0 && p.last != '\n' {
		p.write("\n")
	}
}

// ExitStatus is the exit status of a send that ended with readErr (nil
// at a clean end of file), reporting on stderr why it is not 0.
func (p *SendPrinter) ExitStatus(readErr error) int {
	switch {
	case p.refused != nil:
		fmt.Fprintf(p.errw, "ctx: %s: %s\n", p.cmd, clienv.Describe(p.cmd, p.refused))
		return clienv.ExitUsage
	case p.Done != nil && p.Done.Str("status") == "ok":
		return clienv.ExitOK
	case p.Done != nil:
		p.showStderr()
		return clienv.ExitFailed
	case p.started:
		why := "the server closed the connection"
		if readErr != nil {
			why = readErr.Error()
		}
		fmt.Fprintf(p.errw, "ctx: %s: EIO: no done frame (%s); run %s may still be running (ctx agent status)\n", p.cmd, why, p.Run)
		return clienv.ExitFailed
	}
	return -1 // no reply at all: the caller knows why
}

// showStderr prints, for a run that failed (not one that was cancelled),
// the last lines of the agent's stderr: the reason is usually there
// ("boom: API key missing"), while the error frame only says how the
// program exited. A reply without them (a replay) takes them from the
// session's events.jsonl.
func (p *SendPrinter) showStderr() {
	if p.json || p.Done.Str("status") != abi.StateError {
		return
	}
	lines := p.stderr
	if len(lines) == 0 && p.body == 0 && p.recordedLog != nil {
		lines = p.recordedLog(p.Done.Str("run"), stderrShown)
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(p.errw, "ctx: %s: last lines of the agent's stderr:\n", p.cmd)
	for _, l := range lines {
		fmt.Fprintf(p.errw, "  %s\n", clienv.Printable(l))
	}
}

// toolCallLine is "→ NAME ARGUMENTS", the arguments as compact JSON.
func toolCallLine(o *proto.Object) string {
	line := "→ " + clienv.Printable(o.Str("name"))
	if args := transcript.Compact(o.Raw("arguments")); args != "" {
		line += " " + clienv.Printable(args)
	}
	return line
}

// toolResultLine is "← NAME ok, N bytes" or "← NAME error: first line of
// the result" (NAME from the result, else from its call).
func toolResultLine(o *proto.Object, callName string) string {
	name := o.Str("name")
	if name == "" {
		name = callName
	}
	line := "←"
	if name != "" {
		line += " " + clienv.Printable(name)
	}
	text := toolResultText(o.Raw("content"))
	if string(o.Raw("is_error")) == "true" {
		return line + " error: " + clienv.Printable(clienv.FirstLine(text, maxToolError))
	}
	return fmt.Sprintf("%s ok, %d bytes", line, len(text))
}

// toolResultText is a tool result's content as text: a string, or the
// text of its parts, else the content as JSON.
func toolResultText(raw json.RawMessage) string {
	if text := proto.ContentText(raw); text != "" {
		return text
	}
	return transcript.ResultText(raw)
}

// maxToolError bounds the part of a failed tool's result kept for its line
// before it is cut to the terminal's width.
const maxToolError = 1024

// cutColumns cuts s to at most width characters, "…" marking a cut.
// Characters are counted as one column each: close enough for a status
// line, and never wider than the terminal for the ASCII of names and JSON.
func cutColumns(s string, width int) string {
	if width <= 1 || utf8.RuneCountInString(s) <= width {
		return s
	}
	n := 0
	for i := range s {
		if n == width-1 {
			return s[:i] + "…"
		}
		n++
	}
	return s
}
