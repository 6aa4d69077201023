package main

import (
	"fmt"
	"io"

	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/proto"
)

// Per-run text sources: a run's text is printed from its deltas or from its
// message frames, whichever comes first, never both, because an agent that
// streams deltas usually sends the whole message again at the end.
const (
	srcDelta   = "delta"
	srcMessage = "message"
)

// sendPrinter turns the reply frames of one send into what a person reads
// (or, with --json, passes them through) and remembers how the send ended.
type sendPrinter struct {
	out, errw io.Writer
	json      bool
	// recorded returns the assistant text recorded for a run. A replay
	// returns only start and done (SPEC section 8), so a run that printed
	// nothing gets its text from the session's messages.jsonl.
	recorded func(run string) string

	source  map[string]string // run -> srcDelta or srcMessage
	run     string            // the run of the start frame
	started bool
	done    *proto.Object
	refused *client.ServerError
	last    byte // last byte of text written to out, 0 before any
}

func newSendPrinter(out, errw io.Writer, json bool, recorded func(string) string) *sendPrinter {
	return &sendPrinter{out: out, errw: errw, json: json, recorded: recorded, source: map[string]string{}}
}

// frame handles one reply frame.
func (p *sendPrinter) frame(f client.Frame) {
	if p.json {
		p.out.Write(append(f.Line[:len(f.Line):len(f.Line)], '\n'))
	}
	if f.Obj == nil {
		if !p.json {
			fmt.Fprintf(p.errw, "ctx: send: bad frame from server: %v\n", f.Err)
		}
		return
	}
	o := f.Obj
	switch f.Type() {
	case proto.FrameStart:
		p.started, p.run = true, o.Str("run")
	case proto.FrameDelta:
		p.text(o.Str("run"), srcDelta, o.Str("text"))
	case proto.FrameMessage:
		if role := o.Str("role"); role == "" || role == "assistant" {
			p.text(o.Str("run"), srcMessage, client.MessageText(o))
		}
	case proto.FrameError:
		p.errorFrame(o)
	case proto.FrameDone:
		p.finishRun(o)
	}
}

// text prints s for run if run's text comes from src.
func (p *sendPrinter) text(run, src, s string) {
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

func (p *sendPrinter) write(s string) {
	io.WriteString(p.out, s) // unbuffered: the writer is the terminal or a pipe
	p.last = s[len(s)-1]
}

// errorFrame: before start it is the refusal of the request; during a run it
// is reported but the done frame decides the exit status.
func (p *sendPrinter) errorFrame(o *proto.Object) {
	se := client.FrameError(o)
	if !p.started {
		p.refused = se
		return
	}
	if !p.json {
		fmt.Fprintf(p.errw, "ctx: error: %s\n", se)
	}
}

func (p *sendPrinter) finishRun(o *proto.Object) {
	p.done = o
	run := o.Str("run")
	if p.json || p.source[run] != "" || p.recorded == nil {
		return
	}
	if s := p.recorded(run); s != "" {
		p.source[run] = srcMessage
		p.write(s)
	}
}

// finish ends the text with a newline if it did not end with one.
func (p *sendPrinter) finish() {
	if p.last != 0 && p.last != '\n' {
		p.write("\n")
	}
}

// exitStatus is the exit status of a send that ended with readErr (nil
// at a clean end of file), reporting on stderr why it is not 0.
func (p *sendPrinter) exitStatus(readErr error) int {
	switch {
	case p.refused != nil:
		fmt.Fprintf(p.errw, "ctx: send: %s\n", describe("send", p.refused))
		return exitUsage
	case p.done != nil && p.done.Str("status") == "ok":
		return exitOK
	case p.done != nil:
		return exitFailed
	case p.started:
		why := "the server closed the connection"
		if readErr != nil {
			why = readErr.Error()
		}
		fmt.Fprintf(p.errw, "ctx: send: EIO: no done frame (%s); run %s may still be running (ctx agent status)\n", why, p.run)
		return exitFailed
	}
	return -1 // no reply at all: the caller knows why
}
