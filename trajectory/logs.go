package trajectory

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/jsonscan"
	"github.com/ctxfs/ctxfs/proto"
)

// logLine is what the mapping reads of one line of either log. Strings are
// read leniently (a field of another type reads as ""), because a line
// appended through the mount may carry anything a JSON object can.
type logLine struct {
	typ, role, run, id, model string
	ts                        string    // as recorded
	at                        time.Time // ts parsed; zero when it does not parse
	rawID, rawName, arguments json.RawMessage
	// Of a message line: its text (messageText) and its content's parts
	// (proto.ContentParts) for an assistant or tool message, read with
	// the line, ahead of the mapping (lineReader).
	text               string
	parts              []proto.Part
	prompt, completion *int64
	threadTotal        bool // usage of a CLI's whole thread so far (proto.ThreadUsage)
}

// The members both logs' lines are read by (SPEC 6), named as
// encoding/json names a struct's fields: those of a message line and of a
// part (proto.RawFields), and the events' own. A line's members are cut
// out of it in one pass (jsonscan), by their index here.
const (
	fType = iota
	fRole
	fRun
	fTS
	fID
	fName
	fText
	fArguments
	fInput
	fContent
	fToolCallID
	fIsError
	fModel
	fInputTokens
	fOutputTokens
	fThreadTotal
	nFields
)

var lineFields = jsonscan.NewFields("Type", "Role", "Run", "TS", "ID", "Name", "Text", "Arguments", "Input", "Content",
	"tool_call_id", "is_error", "model", "input_tokens", "output_tokens", "thread_total")

// members are a line's values, by the indexes above.
type members [nFields][]byte

// str is raw as a string, or "" when it is not one (proto.RawString, as
// the message lines are read).
func str(raw json.RawMessage) string { return proto.RawString(raw) }

// word is str of a member whose values are mostly a few words (a line's
// type, a role): those are given as they are, not copied out of the line.
func word(raw json.RawMessage) string {
	if len(raw) > 2 && raw[0] == '"' {
		if w, ok := known[string(raw[1:len(raw)-1])]; ok {
			return w
		}
	}
	return str(raw)
}

// known are the words word gives without a copy.
var known = map[string]string{"user": "user", "assistant": "assistant", "tool": "tool", "system": "system", "start": "start",
	"state": "state", "tool_call": "tool_call", "tool_result": "tool_result", "message": "message", "usage": "usage", "done": "done"}

// recent is str of a member that repeats from one line to the next (a
// line's run): the last one's string is given again, not copied again.
type recent struct{ raw, s string }

func (c *recent) str(raw json.RawMessage) string {
	if string(raw) != c.raw {
		c.raw, c.s = string(raw), str(raw)
	}
	return c.s
}

// integer is raw as an integer, or nil when it is not one.
func integer(raw json.RawMessage) *int64 {
	if len(raw) == 0 { // not there: most lines
		return nil
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return nil
	}
	return &n
}

// parseMessage decodes one messages.jsonl line (see decode) into l. The
// line is copied once, and what the mapping keeps of it (raw ids, names,
// arguments, contents) are slices of the copy.
func parseMessage(b []byte, l *logLine, runs *recent) error {
	var w members
	b = bytes.Clone(b) // b is the scanner's, read over by the next line
	if err := decode(b, &w); err != nil {
		return err
	}
	*l = logLine{
		typ: word(w[fType]), role: word(w[fRole]), run: runs.str(w[fRun]), ts: str(w[fTS]),
		id: str(w[fID]), model: str(w[fModel]),
		rawID: w[fID], rawName: w[fName], arguments: w[fArguments],
		prompt: integer(w[fInputTokens]), completion: integer(w[fOutputTokens]),
		threadTotal: string(w[fThreadTotal]) == "true",
	}
	l.stamp()
	switch content := w[fContent]; l.role {
	case "user", "system":
		l.text = messageText(content)
	case "assistant":
		l.parts = contentParts(content) // read once, for the text and the calls
		l.text = partsText(content, l.parts)
	case "tool":
		l.parts = contentParts(content)
	}
	return nil
}

// parseEvent decodes one events.jsonl line (see decode). An event's text,
// input and content are not read: an event only copies them from
// messages.jsonl. What the mapping keeps of a line (its raw id, name and
// arguments) is copied out of it.
func parseEvent(b []byte, l *logLine, runs *recent) error {
	var w members
	if err := decode(b, &w); err != nil {
		return err
	}
	kept := make([]byte, 0, len(w[fID])+len(w[fName])+len(w[fArguments]))
	keep := func(raw []byte) json.RawMessage {
		if raw == nil {
			return nil
		}
		kept = append(kept, raw...)
		return kept[len(kept)-len(raw) : len(kept) : len(kept)]
	}
	*l = logLine{
		typ: word(w[fType]), run: runs.str(w[fRun]), ts: str(w[fTS]), id: str(w[fID]), model: str(w[fModel]),
		rawID: keep(w[fID]), rawName: keep(w[fName]), arguments: keep(w[fArguments]),
		prompt: integer(w[fInputTokens]), completion: integer(w[fOutputTokens]),
		threadTotal: string(w[fThreadTotal]) == "true",
	}
	l.stamp()
	return nil
}

// decode reads a line's members into w, as json.Unmarshal reads them into
// a struct of json.RawMessage fields. A line that is not a JSON object
// cannot have come through the mount (SPEC 6): the log is damaged, and
// exporting it would hide that, so it is an error.
func decode(b []byte, w *members) error {
	if b[0] != '{' || !lineFields.Object(b, w[:]) {
		return errors.New("not a JSON object")
	}
	return nil
}

// contentParts is proto.ContentParts of a content value cut out of a
// valid line: an array's parts are read here, each once, and keep slices
// of the line (proto.RawFields.Part), as Part.UnmarshalJSON would read
// them into copies.
func contentParts(content json.RawMessage) []proto.Part {
	if len(content) == 0 || content[0] != '[' {
		return proto.ContentParts(content)
	}
	parts := []proto.Part{} // an empty array is no parts, but not none
	var w members
	if !jsonscan.Elements(content, func(e []byte) { parts = append(parts, partOf(e, &w)) }) {
		return nil
	}
	return parts
}

// partOf is a content array's element as a part: an element that is not
// an object is a part of no type.
func partOf(e []byte, w *members) proto.Part {
	if e[0] != '{' || !lineFields.Object(e, w[:]) {
		return proto.Part{}
	}
	f := proto.RawFields{Type: w[fType], Role: w[fRole], Run: w[fRun], TS: w[fTS], ID: w[fID], Name: w[fName],
		Text: w[fText], Arguments: w[fArguments], Input: w[fInput], Content: w[fContent],
		ToolCallID: w[fToolCallID], IsError: w[fIsError]}
	return f.Part()
}

// stamp parses the line's ts; one that is not RFC 3339 is dropped (the
// step goes without a timestamp).
func (l *logLine) stamp() {
	// time.Parse also takes a comma before the fraction; RFC 3339 does not.
	if t, err := time.Parse(time.RFC3339Nano, l.ts); err == nil && !strings.Contains(l.ts, ",") {
		l.at = t
	} else {
		l.ts = ""
	}
}

// lineReader reads one log a line at a time, with one line of look-ahead.
// Blank lines are skipped. The lines are read and decoded ahead, in a
// goroutine of their own (lineSource), a bounded batch at a time: the two
// logs are decoded beside the mapping, on the machine's other cores
// (docs/benchmarks.md#trajectory). What it holds is the batch being
// read, one waiting and the one being used: at most about three times
// batchBytes plus a line each. A batch's array of lines, once used, goes
// back to be read into again (used): a line peek or next gives is the
// caller's until its next call after the one that consumed it.
type lineReader struct {
	batches <-chan batch
	used    chan<- []logLine // arrays of used batches, for lineSource
	cur     []logLine        // the rest of the batch being used
	array   []logLine        // all of it
	end     bool             // the last batch came
	err     error            // what ended the log: nil at its end
	stop    func()           // ends the reading ahead and waits for it
}

// Batches of lines read ahead: this many lines, or bytes of them, a batch.
const (
	batchLines = 256
	batchBytes = 256 << 10
)

// batch is lines read ahead, in order; last says the log ends after them,
// with err (nil at its end). The lines are held by value, a batch's in
// one allocation.
type batch struct {
	lines []logLine
	last  bool
	err   error
}

func newLineReader(name string, r io.Reader, parse func([]byte, *logLine, *recent) error) *lineReader {
	if r == nil {
		r = bytes.NewReader(nil)
	}
	sc := bufio.NewScanner(r)
	// A line holds at most abi.MaxLineBytes, plus its "\r\n" at worst.
	sc.Buffer(make([]byte, 0, 64<<10), abi.MaxLineBytes+2)
	src := &lineSource{name: name, sc: sc, parse: parse}
	batches := make(chan batch, 1)
	used := make(chan []logLine, 2)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		src.run(batches, used, done)
	}()
	var once sync.Once
	return &lineReader{batches: batches, used: used, stop: func() { once.Do(func() { close(done); wg.Wait() }) }}
}

// peek returns the next line without consuming it; nil at the end.
func (r *lineReader) peek() (*logLine, error) {
	for len(r.cur) == 0 {
		if r.end {
			return nil, r.err
		}
		if r.array != nil {
			select {
			case r.used <- r.array[:0]:
			default:
			}
		}
		b := <-r.batches
		r.cur, r.array, r.end, r.err = b.lines, b.lines, b.last, b.err
	}
	return &r.cur[0], nil
}

// next consumes and returns the next line; nil at the end.
func (r *lineReader) next() (*logLine, error) {
	l, err := r.peek()
	if l != nil {
		r.cur = r.cur[1:]
	}
	return l, err
}

// lineSource reads and decodes one log's lines, in order, for a
// lineReader.
type lineSource struct {
	name  string // the log's file name, for errors
	parse func([]byte, *logLine, *recent) error
	sc    *bufio.Scanner
	no    int    // number of the last line read
	runs  recent // the last line's run
}

// run sends the log's lines in batches until its end or an error (in the
// last batch), or until done is closed; it reads into the arrays of used
// batches while there are some.
func (s *lineSource) run(out chan<- batch, used <-chan []logLine, done <-chan struct{}) {
	array := func() []logLine {
		select {
		case a := <-used:
			return a
		default:
			return make([]logLine, 0, batchLines)
		}
	}
	b := batch{lines: array()}
	size := 0
	for {
		b.lines = b.lines[:len(b.lines)+1]
		n, err := s.line(&b.lines[len(b.lines)-1])
		if n == 0 {
			b.lines = b.lines[:len(b.lines)-1]
		}
		size += n
		b.last, b.err = n == 0, err
		if b.last || len(b.lines) == batchLines || size >= batchBytes {
			select {
			case out <- b:
			case <-done:
				return
			}
			if b.last {
				return
			}
			b, size = batch{lines: array()}, 0
		}
	}
}

// line reads and decodes the next line that is not blank into l, and
// says its length; 0 at the end.
func (s *lineSource) line(l *logLine) (int, error) {
	for s.sc.Scan() {
		s.no++
		b := bytes.TrimSpace(s.sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if err := s.parse(b, l, &s.runs); err != nil {
			return 0, s.errorf(s.no, "%v", err)
		}
		return len(b), nil
	}
	if err := s.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return 0, s.errorf(s.no+1, "longer than %d bytes", abi.MaxLineBytes)
		}
		return 0, err
	}
	return 0, nil
}

// errorf reports damage at line no of the log: EIO, as for an unprovable
// log (SPEC 15).
func (s *lineSource) errorf(no int, format string, args ...any) error {
	return abi.Errorf(syscall.EIO, "", "%s line %d: %s", s.name, no, fmt.Sprintf(format, args...))
}
