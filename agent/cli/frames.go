package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/jsonscan"
	"github.com/ctxfs/ctxfs/proto"
)

const (
	// MaxLineBytes bounds one stdout line a Parser takes; the engine
	// reads lines with this bound and hands a longer one over cut, which
	// Parse reports and drops. The CLIs put whole tool results in one
	// line (Claude Code's tool_use_result), hence more than a log line.
	MaxLineBytes = 4 << 20
	// MaxTextBytes bounds the text of one assistant message: what the
	// engine itself puts in one recorded message (a log line holds
	// abi.MaxLineBytes, and JSON may escape a byte into six).
	MaxTextBytes = abi.MaxLineBytes / 8
	// MaxToolBytes bounds a tool call's arguments and a tool result's
	// content, as the built-in tools cap their output (SPEC 17).
	MaxToolBytes = 64 << 10
	// maxFrameBytes is the most a frame may take, leaving room for the
	// run and ts the engine adds (as for a jsonl program's frames).
	maxFrameBytes = abi.MaxLineBytes - 4096
	// maxLogEvent bounds an unmapped event kept whole in a log frame;
	// a longer one is kept as its first bytes of text.
	maxLogEvent = 16 << 10
	// maxQuote bounds what an error frame quotes of the CLI's words.
	maxQuote = 1024
)

// run is the state all parsers share: the CLI's session id, the
// assistant message being built, and whether the run reported an error.
type run struct {
	cli     string
	session string
	errored bool

	// The assistant message being built: its text, then its tool calls,
	// sent as one message frame before the first tool result (so that
	// messages.jsonl holds each call before its result) or at the end.
	text    strings.Builder
	textCut bool
	calls   []*proto.Object
	// textBytes and callBytes are what the text (as JSON, without its
	// quotes) and the calls' parts take in the message frame: a message
	// is sent before a call would take it over maxFrameBytes.
	textBytes int
	callBytes int

	// called are the ids of the tool calls sent, for the CLIs that
	// report a call more than once (started, then completed).
	called map[string]bool
}

// parse checks one line and hands a JSON object to handle, which returns
// the frames it maps to, or false for an event it does not know: that
// event becomes a log frame. Every frame is made to fit a log line.
func (r *run) parse(line []byte, handle func(event []byte) ([]*proto.Object, bool)) []*proto.Object {
	if len(line) > MaxLineBytes {
		return []*proto.Object{r.logf("", "ctxfs: a stdout line of %d bytes or more was dropped (limit %d)", len(line), MaxLineBytes)}
	}
	event := bytes.TrimSpace(line)
	if len(event) == 0 {
		return nil
	}
	if event[0] != '{' || !utf8.Valid(event) || !json.Valid(event) {
		// Kept as text: invalid UTF-8 becomes U+FFFD when it is
		// marshalled, so the log line stays valid.
		return []*proto.Object{r.logEvent("", event)}
	}
	frames, known := handle(event)
	if !known {
		return []*proto.Object{r.logEvent(kindOf(event), event)}
	}
	for i, f := range frames {
		frames[i] = r.fit(f)
	}
	return frames
}

// kindOf is an event's "type", or "".
func kindOf(event []byte) string {
	var e struct{ Type json.RawMessage }
	if json.Unmarshal(event, &e) != nil {
		return ""
	}
	return truncate(proto.RawString(e.Type), 64)
}

// logEvent keeps an event the mapping does not use: whole when it is a
// JSON value of at most maxLogEvent bytes, else its first bytes as text.
func (r *run) logEvent(kind string, event []byte) *proto.Object {
	f := proto.NewObject("type", proto.FrameLog, "stream", "stdout", "cli", r.cli)
	if kind != "" {
		f.Set("kind", kind)
	}
	if len(event) <= maxLogEvent && utf8.Valid(event) && json.Valid(event) {
		f.Set("event", json.RawMessage(event))
		return f
	}
	f.Set("text", truncate(string(event), maxLogEvent))
	f.Set("bytes", len(event))
	return f
}

// logf is a log frame of ctxfs's own words about the stream.
func (r *run) logf(kind, format string, args ...any) *proto.Object {
	f := proto.NewObject("type", proto.FrameLog, "stream", "stdout", "cli", r.cli)
	if kind != "" {
		f.Set("kind", kind)
	}
	f.Set("text", fmt.Sprintf(format, args...))
	return f
}

// fit returns f, or a log frame saying it was dropped when it is over
// maxFrameBytes (many large parts in one event).
func (r *run) fit(f *proto.Object) *proto.Object {
	if n := len(f.Line()); n > maxFrameBytes {
		return r.logf(f.Str("type"), "ctxfs: a %s frame of %d bytes was over the %d-byte limit and dropped", f.Str("type"), n, maxFrameBytes)
	}
	return f
}

// setSession records the CLI's session id the first time the stream names
// one; an id of another shape is not kept, and said in a log frame.
func (r *run) setSession(id string) []*proto.Object {
	switch {
	case id == "" || id == r.session:
		return nil
	case !ValidSessionID(id):
		return []*proto.Object{r.logf("session", "ctxfs: session id %q ignored: not a session id", truncate(id, 64))}
	case r.session == "":
		r.session = id
		return nil
	}
	return []*proto.Object{r.logf("session", "ctxfs: the stream names a second session id %q; %q is kept", truncate(id, 64), r.session)}
}

// SessionID is the CLI's session id once seen.
func (r *run) SessionID() string { return r.session }

// addText adds assistant text to the message being built and returns its
// delta frame, unless the text was streamed already (deltas of its own).
// Text after calls that would take the message over maxFrameBytes starts
// a new one: the message so far is sent first.
func (r *run) addText(text string, streamed bool) []*proto.Object {
	if text == "" {
		return nil
	}
	var frames []*proto.Object
	if len(r.calls) > 0 && r.messageBytes()+textPartOverhead+len(jsonString(truncate(text, MaxTextBytes))) > maxFrameBytes {
		frames = r.flush()
	}
	r.appendText(text)
	if streamed {
		return frames
	}
	return append(frames, r.delta(text))
}

// appendText keeps at most MaxTextBytes of the message's text.
func (r *run) appendText(text string) {
	if room := MaxTextBytes - r.text.Len(); len(text) > room {
		text, r.textCut = truncate(text, room), true
	}
	r.text.WriteString(text)
	r.textBytes += len(jsonString(text)) - 2
}

// jsonString is s as encoding/json writes it.
func jsonString(s string) []byte {
	b, _ := json.Marshal(s) // a string always marshals
	return b
}

// delta is a delta frame, its text cut to MaxTextBytes.
func (r *run) delta(text string) *proto.Object {
	return proto.NewObject("type", proto.FrameDelta, "text", truncate(text, MaxTextBytes))
}

// addCall adds a tool call to the message being built and returns its
// tool_call frame. args are the arguments as the CLI gave them. A call
// that would take the message over maxFrameBytes (many large calls in
// one message) comes after the message so far, sent first as a message
// of its own (so no message is dropped as too large); a call that cannot
// fit even alone (an id or a name of megabytes) is an EFBIG error frame,
// neither sent nor kept.
func (r *run) addCall(id, name string, args json.RawMessage) []*proto.Object {
	args, cut := boundArgs(args)
	part := proto.NewObject("type", "tool_call", "id", id, "name", name, "arguments", args)
	n := partBytes(part)
	if messageOverhead+n > maxFrameBytes {
		return []*proto.Object{r.fail(syscall.EFBIG, "a tool call (id %q, tool %q) of %d bytes is over the %d-byte limit of a message; it is not recorded",
			truncate(id, 64), truncate(name, 64), n, maxFrameBytes)}
	}
	var frames []*proto.Object
	if r.messageBytes()+n > maxFrameBytes {
		frames = r.flush()
	}
	r.calls = append(r.calls, part)
	r.callBytes += n
	f := proto.NewObject("type", proto.FrameToolCall, "id", id, "name", name, "arguments", args)
	if cut {
		f.Set("truncated", true)
	}
	return append(frames, f)
}

// messageOverhead is what a message frame takes besides its parts, with
// its truncated mark and newline.
var messageOverhead = len(proto.NewObject("type", proto.FrameMessage, "role", "assistant",
	"content", []*proto.Object{}, "truncated", true).Line())

// textPartOverhead is what the text part takes besides its text, with the
// comma after it.
var textPartOverhead = len(proto.NewObject("type", "text", "text", "").Line())

// partBytes is what part takes in a message frame's content, with the
// comma after it: its JSON as encoding/json writes a value's own
// (MarshalJSON, '<' in raw arguments escaped into six bytes).
func partBytes(part *proto.Object) int {
	b, err := json.Marshal(part)
	if err != nil {
		return maxFrameBytes + 1 // cannot be: its members are JSON
	}
	return len(b) + 1
}

// messageBytes bounds the line of the message being built.
func (r *run) messageBytes() int {
	n := messageOverhead + r.callBytes
	if r.text.Len() > 0 {
		n += textPartOverhead + r.textBytes
	}
	return n
}

// callOnce is addCall for the first report of a call id, nothing for
// the later ones.
func (r *run) callOnce(id, name string, args json.RawMessage) []*proto.Object {
	if r.called == nil {
		r.called = map[string]bool{}
	}
	if r.called[id] {
		return nil
	}
	remember(r.called, id, true)
	return r.addCall(id, name, args)
}

// boundArgs keeps arguments of at most MaxToolBytes that are JSON; others
// become a string of their first bytes (cut is then true).
func boundArgs(args json.RawMessage) (json.RawMessage, bool) {
	args = bytes.TrimSpace(args)
	if len(args) == 0 {
		return json.RawMessage("{}"), false
	}
	if len(args) <= MaxToolBytes && json.Valid(args) {
		return args, false
	}
	s, _ := json.Marshal(truncate(string(args), MaxToolBytes))
	return s, true
}

// flush returns the message being built as a message frame, if it holds
// anything, and starts a new one.
func (r *run) flush() []*proto.Object {
	if r.text.Len() == 0 && len(r.calls) == 0 {
		return nil
	}
	var parts []*proto.Object
	if r.text.Len() > 0 {
		parts = append(parts, proto.NewObject("type", "text", "text", r.text.String()))
	}
	parts = append(parts, r.calls...)
	f := proto.NewObject("type", proto.FrameMessage, "role", "assistant", "content", parts)
	if r.textCut {
		f.Set("truncated", true)
	}
	r.text.Reset()
	r.textCut, r.calls = false, nil
	r.textBytes, r.callBytes = 0, 0
	return []*proto.Object{f}
}

// toolResult is the frames of one tool result: the message built so far
// (which holds its call), then the result, content cut to MaxToolBytes.
func (r *run) toolResult(id, name, content string, isError bool) []*proto.Object {
	frames := r.flush()
	f := proto.NewObject("type", proto.FrameToolResult, "tool_call_id", id)
	if name != "" {
		f.Set("name", name)
	}
	f.Set("content", truncate(content, MaxToolBytes))
	f.Set("is_error", isError)
	if len(content) > MaxToolBytes {
		f.Set("truncated", true)
	}
	return append(frames, f)
}

// usage is a usage frame; model may be "". Its counts are the CLI's,
// clamped (proto.ClampUsage).
func usage(model string, in, out int64, extra ...any) *proto.Object {
	f := proto.NewObject("type", proto.FrameUsage)
	if model != "" {
		f.Set("model", model)
	}
	f.Set("input_tokens", in)
	f.Set("output_tokens", out)
	for i := 0; i+1 < len(extra); i += 2 {
		f.Set(extra[i].(string), extra[i+1])
	}
	proto.ClampUsage(f)
	return f
}

// fail is an error frame with errno and the CLI's words (bounded); the
// run's status is then "error".
func (r *run) fail(errno syscall.Errno, format string, args ...any) *proto.Object {
	r.errored = true
	return proto.ErrorFrame(abi.Errorf(errno, r.cli, "%s", truncate(fmt.Sprintf(format, args...), maxQuote)))
}

// finish is Finish for every CLI: the message still held, then, when the
// CLI exited non-zero without reporting an error in its stream, an error
// frame from its stderr (ENOENT when unknown says the session to resume
// is not there).
func (r *run) finish(exit int, stderrTail []byte, unknown *regexp.Regexp) ([]*proto.Object, string) {
	frames := r.flush()
	if exit != 0 && !r.errored {
		said := lastLine(stderrTail)
		switch {
		case unknown.Match(stderrTail):
			frames = append(frames, r.fail(syscall.ENOENT, "the session to resume is not there: %s", lineOf(stderrTail, unknown)))
		case said != "":
			frames = append(frames, r.fail(syscall.EIO, "exited with status %d: %s", exit, said))
		default:
			frames = append(frames, r.fail(syscall.EIO, "exited with status %d", exit))
		}
	}
	for i, f := range frames {
		frames[i] = r.fit(f)
	}
	if r.errored || exit != 0 {
		return frames, abi.StateError
	}
	return frames, "ok"
}

// lastLine is the last non-empty line of b, without terminal colours.
func lastLine(b []byte) string {
	lines := strings.Split(ansi().ReplaceAllString(string(b), ""), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return truncate(l, maxQuote)
		}
	}
	return ""
}

// lineOf is the line of b that re matches, without terminal colours.
func lineOf(b []byte, re *regexp.Regexp) string {
	for _, l := range strings.Split(ansi().ReplaceAllString(string(b), ""), "\n") {
		if re.MatchString(l) {
			return truncate(strings.TrimSpace(l), maxQuote)
		}
	}
	return ""
}

// ansi matches terminal colour sequences, which the CLIs put in stderr.
var ansi = lazyRegexp(`\x1b\[[0-9;]*[A-Za-z]`)

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// decode reads an event into v; false when it does not have v's shape.
func decode(event []byte, v any) bool { return json.Unmarshal(event, v) == nil }

// contentText is the text of a tool result's content as the CLIs give it:
// a string, or parts whose "text" fields are joined with newlines. The
// parts are read one at a time: a slice of them all decoded (a 4 MiB
// line holds 1.4 million empty ones) took the server up by some 280 MiB
// a line.
func contentText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	if raw[0] == '"' {
		return proto.RawString(raw)
	}
	if raw[0] != '[' {
		return string(raw) // an object or a number: as it came
	}
	var b strings.Builder
	var v [1][]byte
	jsonscan.Elements(raw, func(e []byte) {
		if e[0] != '{' || !partText.Object(e, v[:]) {
			return
		}
		if text := proto.RawString(v[0]); text != "" {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(text)
		}
	})
	return b.String()
}

// partText is the member of a part contentText reads.
var partText = jsonscan.NewFields("text")
