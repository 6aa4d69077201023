package inspect

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/proto"
)

const RunsHelp = `Prints the session's runs, oldest first: run id, status, start and end
time, and the first line of the run's input. Status is ok, error or
cancelled as the run ended; running or queued while the server has it;
interrupted when the server stopped while it ran. --grep WORD keeps the
runs whose input or assistant text contains WORD (any case, any script);
--interrupted keeps the interrupted runs. On a terminal the columns are
aligned under a header; otherwise fields are tab-separated. --json prints
one object per run.
`

// Run statuses that runs shows besides a done's own status (ok, error,
// cancelled): the server's phase of a run without an end, and a run the
// server closed after a crash, or that is still waiting for that.
const (
	runRunning     = "running"
	runInterrupted = "interrupted"
)

// maxInputShown bounds the input kept per run: a run's record stays small
// however long its messages are.
const maxInputShown = 200

// runInfo is one run as runs prints it (--json: one object a line).
type runInfo struct {
	Run         string `json:"run"`
	Status      string `json:"status"`
	Started     string `json:"started"`
	Ended       string `json:"ended,omitempty"`
	Input       string `json:"input"`
	Error       string `json:"error,omitempty"` // errno of the run's first error event
	Interrupted bool   `json:"interrupted"`

	ended    bool
	hasInput bool
	matched  bool // --grep: the input or an assistant text contains the word
}

// runLog gathers the runs of one session from its events and messages.
type runLog struct {
	runs   []*runInfo // in start order, oldest first
	byID   map[string]*runInfo
	grep   string // lower case; "" keeps every run
	frozen bool   // no new runs: only ends of known runs are applied
	bad    int    // malformed lines skipped
}

func newRunLog(grep string) *runLog {
	return &runLog{byID: map[string]*runInfo{}, grep: strings.ToLower(grep)}
}

func Runs(e *clienv.Env, p *clienv.Parsed) int {
	w, err := clienv.Resolve(e, p, p.Args[0])
	if err != nil {
		return clienv.Fail(e, "runs", err, clienv.ExitFailed)
	}
	l, code := readRuns(e, w, p.Str("grep"))
	if l == nil {
		return code
	}
	if l.bad > 0 {
		fmt.Fprintf(e.Stderr, "ctx: runs: skipped %d malformed log lines\n", l.bad)
	}
	printRuns(e.Stdout, l.filter(p.On("interrupted")), p.On("json"))
	return code
}

// readRuns reads the session's events, settles the runs without an end
// with the server, then reads the messages for inputs and --grep. It
// returns a nil log and the exit status when the command must stop.
func readRuns(e *clienv.Env, w *clienv.Where, grep string) (*runLog, int) {
	ev, err := os.Open(w.Loc.SessionFile(w.Session, abi.FileEvents))
	if err != nil {
		return nil, clienv.Fail(e, "runs", clienv.Missing(w, w.Session, err), clienv.ExitFailed)
	}
	defer ev.Close()
	l := newRunLog(grep)
	evr := newLogReader(ev)
	if err := l.read(evr, l.event); err != nil {
		return nil, clienv.Fail(e, "runs", err, clienv.ExitFailed)
	}
	if code := l.settle(e, w, evr); code != clienv.ExitOK {
		return nil, code
	}
	msgs, err := os.Open(w.Loc.SessionFile(w.Session, abi.FileMessages))
	if err == nil {
		defer msgs.Close()
		err = l.read(newLogReader(msgs), l.message)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, clienv.Fail(e, "runs", err, clienv.ExitFailed)
	}
	return l, clienv.ExitOK
}

// settle decides the runs without an end. The server knows which are
// queued or running; asking it also loads the session, which closes the
// runs a crash interrupted. Events recorded since the first read are
// then read too (evr goes on where it stopped), so that a run that ended
// meanwhile shows its end; what is still open and unknown to the server
// was interrupted.
func (l *runLog) settle(e *clienv.Env, w *clienv.Where, evr *logReader) int {
	if l.open() == 0 {
		return clienv.ExitOK
	}
	phases, err := runPhases(e, w)
	if err == context.Canceled {
		return clienv.ExitInterrupted
	}
	if err != nil {
		fmt.Fprintf(e.Stderr, "ctx: runs: status: %s; runs without an end are shown as interrupted\n", clienv.Describe("status", err))
	}
	l.frozen = true
	if err := l.read(evr, l.event); err != nil {
		return clienv.Fail(e, "runs", err, clienv.ExitFailed)
	}
	for _, r := range l.runs {
		switch {
		case r.ended:
		case phases[r.Run] != "":
			r.Status = phases[r.Run]
		default:
			r.Status, r.Interrupted = runInterrupted, true
		}
	}
	return clienv.ExitOK
}

// runPhases asks the server for the session's queued and running runs.
func runPhases(e *clienv.Env, w *clienv.Where) (map[string]string, error) {
	req := proto.NewObject("op", proto.OpStatus, "session", w.Session, "scope", w.Scope)
	if w.Scope == abi.ScopeShared {
		req.Set("space", w.Loc.Space)
	}
	f, err := clienv.Call(e, w, req, proto.FrameStatus)
	if err != nil {
		return nil, err
	}
	var runs []struct{ Run, Phase string }
	json.Unmarshal(f.Obj.Raw("runs"), &runs)
	phases := map[string]string{}
	for _, r := range runs {
		if r.Phase == "" {
			r.Phase = runRunning
		}
		phases[r.Run] = r.Phase
	}
	return phases, nil
}

func (l *runLog) open() int {
	n := 0
	for _, r := range l.runs {
		if !r.ended {
			n++
		}
	}
	return n
}

// read applies each line of lr to l with apply.
func (l *runLog) read(lr *logReader, apply func([]byte) bool) error {
	defer func() { l.bad += lr.takeBad() }()
	for {
		line, err := lr.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if !apply(line) {
			l.bad++
		}
	}
}

// eventFields are the fields of an events.jsonl line that runs uses.
type eventFields struct {
	Type        string `json:"type"`
	Run         string `json:"run"`
	Status      string `json:"status"`
	Code        string `json:"code"`
	TS          string `json:"ts"`
	Interrupted bool   `json:"interrupted"`
}

// event applies one events.jsonl line; false when it is malformed. Only
// the server writes start and done; interrupted comes from done alone,
// because a program may print an error frame with any code.
func (l *runLog) event(line []byte) bool {
	var ev eventFields
	if !decodeLine(line, &ev, func() bool { return ev.Type == proto.FrameStart || ev.Type == proto.FrameDone }) {
		return false
	}
	r := l.byID[ev.Run]
	switch {
	case ev.Run == "":
	case ev.Type == proto.FrameStart && r == nil && !l.frozen:
		r = &runInfo{Run: ev.Run, Started: ev.TS}
		l.runs = append(l.runs, r)
		l.byID[ev.Run] = r
	case r == nil || r.ended:
	case ev.Type == proto.FrameError && r.Error == "":
		r.Error = ev.Code
	case ev.Type == proto.FrameDone:
		r.ended, r.Ended, r.Status, r.Interrupted = true, ev.TS, ev.Status, ev.Interrupted
		if r.Interrupted {
			r.Status = runInterrupted
		}
	}
	return true
}

// message applies one messages.jsonl line (proto.Message): the first user
// message of a run is its input, and --grep looks at user and assistant
// text as it goes, so that no text is kept beyond its line. A line that is
// not an object, or whose text is read and whose content has no shape a
// message's may have, is malformed.
func (l *runLog) message(line []byte) bool {
	m, err := proto.ParseMessage(line)
	if err != nil {
		return false
	}
	r := l.byID[m.Run]
	if r == nil || m.Role != "user" && m.Role != "assistant" {
		return true
	}
	needInput := m.Role == "user" && !r.hasInput
	if !needInput && (l.grep == "" || r.matched) {
		return true
	}
	if !proto.HasTextShape(m.Content) {
		return false
	}
	text := m.Text()
	if needInput {
		r.Input, r.hasInput = clienv.FirstLine(text, maxInputShown), true
	}
	if l.grep != "" && !r.matched {
		r.matched = strings.Contains(strings.ToLower(text), l.grep)
	}
	return true
}

// decodeLine decodes a log line that must be a JSON object into v. A
// field of an unexpected type makes the line malformed only when strict
// says that the line matters (its other fields are decoded anyway).
func decodeLine(line []byte, v any, strict func() bool) bool {
	if t := bytes.TrimLeft(line, " \t\r"); len(t) == 0 || t[0] != '{' {
		return false
	}
	err := json.Unmarshal(line, v)
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return !strict()
	}
	return err == nil
}

// filter returns the runs that --grep and --interrupted keep.
func (l *runLog) filter(interrupted bool) []*runInfo {
	var out []*runInfo
	for _, r := range l.runs {
		if (l.grep == "" || r.matched) && (!interrupted || r.Interrupted) {
			out = append(out, r)
		}
	}
	return out
}

// printRuns writes one line per run: aligned columns under a header on a
// terminal, tab-separated fields for pipelines, or JSON objects.
func printRuns(w io.Writer, runs []*runInfo, asJSON bool) {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		for _, r := range runs {
			enc.Encode(r)
		}
		return
	}
	out := w
	var tw *tabwriter.Writer
	if clienv.IsTerminal(w) {
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		out = tw
		fmt.Fprintln(tw, "RUN\tSTATUS\tSTARTED\tENDED\tINPUT")
	}
	for _, r := range runs {
		fmt.Fprintf(out, "%s\t%s\t%s\t%s\t%s\n", clienv.Printable(r.Run), clienv.Printable(r.Status),
			orDash(clienv.Printable(r.Started)), orDash(clienv.Printable(r.Ended)), clienv.Printable(r.Input))
	}
	if tw != nil {
		tw.Flush()
	}
}

// logReader reads a log a line at a time. A line is at most
// abi.MaxLineBytes (the server refuses longer ones); a longer line, which
// only damage can make, is skipped without being held in memory and
// counted as bad. At end of file it can be read on: it goes on where it
// stopped, seeing what was appended since.
type logReader struct {
	lines *client.LineReader
	bad   int
	err   error // a read error, returned once the lines before it are
}

func newLogReader(r io.Reader) *logReader {
	return &logReader{lines: client.NewLineReader(r, abi.MaxLineBytes)}
}

// next returns the next non-blank line without its newline (valid until
// the next call), or io.EOF.
func (lr *logReader) next() ([]byte, error) {
	for lr.err == nil {
		line, long, err := lr.lines.Next()
		if err != nil && err != io.EOF {
			lr.err = err
		}
		if long {
			lr.bad++
		} else if len(line) > 0 {
			return line, nil
		}
		if err == io.EOF {
			return nil, io.EOF
		}
	}
	err := lr.err
	lr.err = nil
	return nil, err
}

// takeBad returns the count of over-long lines and resets it.
func (lr *logReader) takeBad() int {
	n := lr.bad
	lr.bad = 0
	return n
}

// orDash shows an empty field as "-", so that a table's columns stay in
// place.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
