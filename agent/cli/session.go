package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/proto"
)

// Import reads the session files the CLIs keep on disk, for `ctx agent
// import` (SPEC 16): Claude Code's ~/.claude/projects/*/<uuid>.jsonl and
// Codex's ~/.codex/sessions/**/rollout-*.jsonl.

// MaxSessionLine bounds one line of a session file: the CLIs keep whole
// tool results and request bodies on one line.
const MaxSessionLine = 16 << 20

// Session is a CLI session file as ctxfs imports it.
type Session struct {
	// ID is the CLI's own session id (ValidSessionID): the key of
	// index/by-uuid/, and what the next send resumes.
	ID string
	// CWD is the directory the CLI ran in, as the file says ("" when it
	// does not).
	CWD string
	// Messages are messages.jsonl lines in the file's order, without
	// "run" (the engine adds it): {"role":"user","content":TEXT},
	// {"role":"assistant","content":[text and tool_call parts]},
	// {"role":"tool","name":N,"content":[one tool_result part]}; each
	// with "ts" when the file gives the time. Text and tool results are
	// cut as a stream's are (MaxTextBytes, MaxToolBytes), and a reply
	// one line cannot hold is several assistant messages (fitParts).
	Messages []*proto.Object
}

// ReadSession reads one session file of cli (ClaudeCode or Codex). A file
// that is not one is EINVAL naming its first bad line; nothing is
// returned of it.
func ReadSession(cli string, r io.Reader) (*Session, error) {
	var s sessionReader
	switch cli {
	case ClaudeCode:
		s.line = s.claudeLine
	case Codex:
		s.line = s.codexLine
	default:
		return nil, abi.Errorf(syscall.EINVAL, "import", "cannot import %q sessions (only %s and %s)", cli, ClaudeCode, Codex)
	}
	s.cli = cli
	if err := s.read(r); err != nil {
		return nil, err
	}
	return &s.out, nil
}

// sessionReader is the state of one file's reading.
type sessionReader struct {
	cli  string
	line func(n int, raw []byte) error
	out  Session
	// names are the tool names of the calls seen, for their results.
	names map[string]string
	// open is the assistant message that later tool calls of the same
	// reply join (nil after anything else).
	open *assistantMessage
}

type assistantMessage struct {
	id    string // the reply's id (Claude Code writes a reply a block a line)
	text  strings.Builder
	calls []*proto.Object
	msg   *proto.Object
}

func (s *sessionReader) read(r io.Reader) error {
	br := bufio.NewReaderSize(r, 64<<10)
	n := 0
	for {
		n++
		raw, err := readSessionLine(br)
		if errors.Is(err, io.EOF) && len(raw) == 0 {
			break
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return s.errorf(n, "%v", err)
		}
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		if !utf8.Valid(raw) || !json.Valid(raw) || bytes.TrimSpace(raw)[0] != '{' {
			return s.errorf(n, "not a JSON object")
		}
		if err := s.line(n, raw); err != nil {
			return err
		}
	}
	s.close()
	if s.out.ID == "" {
		return abi.Errorf(syscall.EINVAL, s.cli, "no session id in the file")
	}
	if len(s.out.Messages) == 0 {
		return abi.Errorf(syscall.EINVAL, s.cli, "no messages in the file")
	}
	return nil
}

// readSessionLine reads one line without its newline; a line over
// MaxSessionLine is an error.
func readSessionLine(br *bufio.Reader) ([]byte, error) {
	line, err := proto.ReadLineWithin(br, MaxSessionLine)
	if errors.Is(err, proto.ErrLineTooLong) {
		return nil, fmt.Errorf("line over %d bytes", MaxSessionLine)
	}
	return bytes.TrimSuffix(line, []byte("\n")), err
}

func (s *sessionReader) errorf(n int, format string, args ...any) error {
	return abi.Errorf(syscall.EINVAL, s.cli, "line %d: %s", n, truncate(fmt.Sprintf(format, args...), maxQuote))
}

// setID records the file's session id; a second, different one is EINVAL.
func (s *sessionReader) setID(n int, id string) error {
	switch {
	case id == "" || id == s.out.ID:
		return nil
	case !ValidSessionID(id):
		return s.errorf(n, "%q is not a session id", truncate(id, 64))
	case s.out.ID != "":
		return s.errorf(n, "a second session id %q (the file's is %q)", truncate(id, 64), s.out.ID)
	}
	s.out.ID = id
	return nil
}

// add appends a message, closing the open assistant message first.
func (s *sessionReader) add(msg *proto.Object) {
	s.close()
	s.out.Messages = append(s.out.Messages, msg)
}

func (s *sessionReader) user(text, ts string) {
	if text != "" {
		s.add(stamped(proto.NewObject("role", "user", "content", truncate(text, MaxTextBytes)), ts))
	}
}

// assistant returns the open assistant message of reply id ("" joins the
// open one whatever it is), opening a new one when needed.
func (s *sessionReader) assistant(id, ts string) *assistantMessage {
	if s.open != nil && (id == "" || id == s.open.id) {
		return s.open
	}
	s.close()
	s.open = &assistantMessage{id: id, msg: stamped(proto.NewObject("role", "assistant"), ts)}
	return s.open
}

func (s *sessionReader) call(a *assistantMessage, id, name string, args json.RawMessage) {
	args, _ = boundArgs(args)
	a.calls = append(a.calls, proto.NewObject("type", "tool_call", "id", id, "name", name, "arguments", proto.ToolArguments(args)))
	if s.names == nil {
		s.names = map[string]string{}
	}
	remember(s.names, id, name)
}

func (s *sessionReader) result(id, content string, isError bool, ts string) {
	part := proto.NewObject("type", "tool_result", "tool_call_id", id, "content", truncate(content, MaxToolBytes), "is_error", isError)
	msg := proto.NewObject("role", "tool")
	if name := s.names[id]; name != "" {
		msg.Set("name", name)
	}
	msg.Set("content", []*proto.Object{part})
	s.add(stamped(msg, ts))
}

// close ends the open assistant message: it is kept when it holds text or
// calls, as several messages in order when one line cannot hold them all.
func (s *sessionReader) close() {
	a := s.open
	s.open = nil
	if a == nil || (a.text.Len() == 0 && len(a.calls) == 0) {
		return
	}
	var parts []*proto.Object
	if a.text.Len() > 0 {
		parts = append(parts, proto.NewObject("type", "text", "text", truncate(a.text.String(), MaxTextBytes)))
	}
	ts := a.msg.Raw("ts")
	for _, content := range fitParts(append(parts, a.calls...)) {
		msg := proto.NewObject("role", "assistant", "content", content)
		if ts != nil {
			msg.Set("ts", ts) // last, as in messages.jsonl
		}
		s.out.Messages = append(s.out.Messages, msg)
	}
}

// fitParts cuts a reply's parts, in order, into the contents of messages
// whose lines each stay within maxFrameBytes, as a stream's are (addCall):
// the server takes no longer line, and refused the whole import for one
// (a Codex reply of twenty parallel calls of 60 KiB made a line of 1.2
// MB). A part is never cut: text and arguments are bounded already.
func fitParts(parts []*proto.Object) [][]*proto.Object {
	var out [][]*proto.Object
	var cur []*proto.Object
	n := messageOverhead
	for _, p := range parts {
		size := partBytes(p)
		if len(cur) > 0 && n+size > maxFrameBytes {
			out, cur, n = append(out, cur), nil, messageOverhead
		}
		cur = append(cur, p)
		n += size
	}
	return append(out, cur)
}

// stamped sets "ts" from a file's time, when it is one.
func stamped(msg *proto.Object, ts string) *proto.Object {
	if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
		msg.Set("ts", abi.TS(t))
	}
	return msg
}

// claudeLine reads one line of a Claude Code project file: user and
// assistant lines of the main conversation; everything else (attachments,
// request records, queue operations, costs, sidechains of subagents,
// meta lines) is Claude Code's own bookkeeping.
func (s *sessionReader) claudeLine(n int, raw []byte) error {
	var l struct {
		Type        string          `json:"type"`
		SessionID   string          `json:"sessionId"`
		CWD         string          `json:"cwd"`
		Timestamp   string          `json:"timestamp"`
		IsSidechain bool            `json:"isSidechain"`
		IsMeta      bool            `json:"isMeta"`
		IsAPIError  bool            `json:"isApiErrorMessage"`
		Message     json.RawMessage `json:"message"`
	}
	if !decode(raw, &l) {
		return s.errorf(n, "not a Claude Code session line")
	}
	if err := s.setID(n, l.SessionID); err != nil {
		return err
	}
	if (l.Type != "user" && l.Type != "assistant") || l.IsSidechain || l.IsMeta || l.IsAPIError {
		return nil
	}
	if s.out.CWD == "" {
		s.out.CWD = l.CWD
	}
	var m struct {
		ID      string          `json:"id"`
		Content json.RawMessage `json:"content"`
	}
	if !decode(l.Message, &m) || len(m.Content) == 0 {
		return s.errorf(n, "a %s line without a message", l.Type)
	}
	if m.Content[0] == '"' {
		if l.Type == "user" {
			s.user(proto.RawString(m.Content), l.Timestamp)
		} else {
			s.assistant(m.ID, l.Timestamp).text.WriteString(proto.RawString(m.Content))
		}
		return nil
	}
	var parts []claudePart
	if json.Unmarshal(m.Content, &parts) != nil {
		return s.errorf(n, "a %s message whose content is neither text nor parts", l.Type)
	}
	for _, p := range parts {
		switch {
		case l.Type == "assistant" && p.Type == "text":
			s.assistant(m.ID, l.Timestamp).text.WriteString(p.Text)
		case l.Type == "assistant" && p.Type == "tool_use":
			s.call(s.assistant(m.ID, l.Timestamp), p.ID, p.Name, p.Input)
		case l.Type == "user" && p.Type == "text":
			s.user(p.Text, l.Timestamp)
		case l.Type == "user" && p.Type == "tool_result":
			s.result(p.ToolUseID, contentText(p.Content), p.IsError, l.Timestamp)
		}
	}
	return nil
}

// codexContext matches the user messages Codex writes itself (the
// environment, the instructions): one tag around everything.
var codexContext = lazyRegexp(`(?s)^\s*<([a-z_ ]+)>.*</([a-z_ ]+)>\s*$`)

// codexLine reads one line of a Codex rollout: the session's meta, and
// the response items (messages, function calls and their outputs);
// events, reasoning, turn contexts and token counts are Codex's own.
func (s *sessionReader) codexLine(n int, raw []byte) error {
	var l struct {
		Timestamp string          `json:"timestamp"`
		Type      string          `json:"type"`
		Payload   json.RawMessage `json:"payload"`
	}
	if !decode(raw, &l) || len(l.Payload) == 0 {
		return s.errorf(n, "not a Codex rollout line")
	}
	var p struct {
		Type      string          `json:"type"`
		ID        string          `json:"id"`
		CWD       string          `json:"cwd"`
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		Input     json.RawMessage `json:"input"`
		CallID    string          `json:"call_id"`
		Output    json.RawMessage `json:"output"`
	}
	if !decode(l.Payload, &p) {
		return s.errorf(n, "a %s line whose payload has another shape", l.Type)
	}
	switch {
	case l.Type == "session_meta":
		if s.out.CWD == "" {
			s.out.CWD = p.CWD
		}
		return s.setID(n, p.ID)
	case l.Type != "response_item":
		return nil
	}
	switch p.Type {
	case "message":
		text := codexText(p.Content)
		switch p.Role {
		case "user":
			if m := codexContext().FindStringSubmatch(text); m == nil || m[1] != m[2] {
				s.user(text, l.Timestamp)
			}
		case "assistant":
			s.assistant("", l.Timestamp).text.WriteString(text)
		}
	case "function_call", "custom_tool_call":
		args := p.Arguments
		if args == nil {
			args = p.Input
		}
		s.call(s.assistant("", l.Timestamp), p.CallID, p.Name, args)
	case "function_call_output", "custom_tool_call_output":
		content, failed := codexOutput(p.Output)
		s.result(p.CallID, content, failed, l.Timestamp)
	}
	return nil
}

// codexText joins the text of a message's parts (input_text,
// output_text).
func codexText(content json.RawMessage) string {
	var parts []struct {
		Text string `json:"text"`
	}
	json.Unmarshal(content, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// codexOutput is a call's output: a string, or {"content","success"}.
func codexOutput(raw json.RawMessage) (string, bool) {
	var o struct {
		Content json.RawMessage `json:"content"`
		Success *bool           `json:"success"`
	}
	if len(raw) > 0 && raw[0] == '{' && json.Unmarshal(raw, &o) == nil {
		return contentText(o.Content), o.Success != nil && !*o.Success
	}
	return contentText(raw), false
}
