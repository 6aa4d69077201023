package cli

import (
	"encoding/json"
	"strings"
	"syscall"

	"github.com/ctxfs/ctxfs/agent/modelapi"
	"github.com/ctxfs/ctxfs/internal/jsonscan"
	"github.com/ctxfs/ctxfs/proto"
)

// claudeCode is Claude Code (@anthropic-ai/claude-code): `claude -p
// --output-format stream-json --verbose`, one JSON event a line (system,
// stream_event, assistant, user, result).
type claudeCode struct{}

func (claudeCode) Name() string    { return ClaudeCode }
func (claudeCode) Program() string { return "claude" }
func (claudeCode) Version() string { return "2.1.332" }

func (claudeCode) Invocation(o Options) (Invocation, error) {
	if err := checkResume(ClaudeCode, o.Resume); err != nil {
		return Invocation{}, err
	}
	// --include-partial-messages: the text as it is generated
	// (stream_event text deltas), not only each whole message.
	args := []string{"-p", "--output-format", "stream-json", "--verbose", "--include-partial-messages"}
	if o.Model != "" {
		args = append(args, "--model", o.Model)
	}
	if o.Resume != "" {
		args = append(args, "--resume", o.Resume)
	}
	// No update checks, telemetry or error reports: the run talks to the
	// model's endpoint only.
	env := []string{"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1"}
	if o.BaseURL != "" {
		env = append(env, "ANTHROPIC_BASE_URL="+o.BaseURL)
	}
	return Invocation{Args: args, Env: env, KeyVar: "ANTHROPIC_API_KEY"}, nil
}

func (claudeCode) NewParser() Parser {
	return &claudeParser{run: run{cli: ClaudeCode}, streamed: map[string]bool{}, names: map[string]string{}}
}

// claudeUnknownSession is what Claude Code says of a --resume id it has no
// session for (in the result event's errors and on stderr; exit 1).
var claudeUnknownSession = lazyRegexp(`No conversation found with session ID`)

// maxTracked bounds the ids a parser remembers (message ids streamed,
// tool call names): a hostile stream cannot grow them without end.
const maxTracked = 4096

// maxTrackedBytes bounds an id, and a tool name, that a parser remembers:
// the CLIs' are tens of bytes, and 4096 ids of a stdout line's size each
// (MaxLineBytes) would hold 16 GiB of the server's memory for one run. A
// longer one is not remembered (a hostile stream's: its message's text
// may then come twice, its result without the tool's name).
const maxTrackedBytes = 1 << 10

type claudeParser struct {
	run
	model string
	// current is the id of the message being streamed (message_start);
	// streamed are the ids of messages whose text came as stream_event
	// deltas already; names, the tool name of each call id.
	current  string
	streamed map[string]bool
	names    map[string]string
}

type claudeEvent struct {
	Type            string          `json:"type"`
	Subtype         string          `json:"subtype"`
	SessionID       string          `json:"session_id"`
	Model           string          `json:"model"`
	Message         json.RawMessage `json:"message"`
	Event           json.RawMessage `json:"event"`
	ParentToolUseID json.RawMessage `json:"parent_tool_use_id"`
	IsAPIError      bool            `json:"is_api_error_message"`
	// result
	IsError        bool            `json:"is_error"`
	Result         string          `json:"result"`
	Errors         json.RawMessage `json:"errors"` // read one at a time (claudeWords)
	APIErrorStatus json.RawMessage `json:"api_error_status"`
	Usage          *claudeUsage    `json:"usage"`
	TotalCostUSD   json.RawMessage `json:"total_cost_usd"`
}

type claudeUsage struct {
	InputTokens         int64 `json:"input_tokens"`
	OutputTokens        int64 `json:"output_tokens"`
	CacheReadTokens     int64 `json:"cache_read_input_tokens"`
	CacheCreationTokens int64 `json:"cache_creation_input_tokens"`
}

type claudeMessage struct {
	ID    string `json:"id"`
	Model string `json:"model"`
	// Content is the parts, read one at a time (parts): a slice of them
	// all would hold 24 bytes and a copy for each.
	Content json.RawMessage `json:"content"`
}

type claudePart struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

func (p *claudeParser) Parse(line []byte) []*proto.Object { return p.parse(line, p.event) }

func (p *claudeParser) Finish(exit int, stderrTail []byte) ([]*proto.Object, string) {
	return p.finish(exit, stderrTail, claudeUnknownSession())
}

func (p *claudeParser) event(raw []byte) ([]*proto.Object, bool) {
	var ev claudeEvent
	if !decode(raw, &ev) {
		return nil, false
	}
	frames := p.setSession(ev.SessionID)
	switch {
	case ev.Type == "system" && ev.Subtype == "init":
		p.model = ev.Model
		return frames, true
	case ev.Type == "stream_event":
		return append(frames, p.streamEvent(ev.Event)...), true
	case ev.Type == "assistant" && !ev.IsAPIError && isNull(ev.ParentToolUseID):
		more, ok := p.assistant(ev.Message)
		return append(frames, more...), ok
	case ev.Type == "user" && isNull(ev.ParentToolUseID):
		more, ok := p.user(ev.Message)
		return append(frames, more...), ok
	case ev.Type == "result":
		return append(frames, p.result(ev)...), true
	}
	// Other system events (status, api_retry, compact_boundary, hooks),
	// a subagent's messages, the synthetic message that repeats an API
	// error (the result event reports it): kept as log events.
	return append(frames, p.logEvent(ev.Type, raw)), true
}

func isNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

// streamEvent maps the API's own stream events (with
// --include-partial-messages): text deltas are the run's deltas; the
// rest is carried whole by the assistant event that follows.
func (p *claudeParser) streamEvent(raw json.RawMessage) []*proto.Object {
	var se struct {
		Type    string `json:"type"`
		Message struct {
			ID string `json:"id"`
		} `json:"message"`
		Delta struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"delta"`
	}
	if !decode(raw, &se) {
		return []*proto.Object{p.logEvent("stream_event", raw)}
	}
	switch se.Type {
	case "message_start":
		p.current = se.Message.ID
	case "content_block_delta":
		if se.Delta.Type == "text_delta" && se.Delta.Text != "" {
			remember(p.streamed, p.current, true)
			return []*proto.Object{p.delta(se.Delta.Text)}
		}
	}
	return nil
}

// remember sets m[k], forgetting everything once m holds maxTracked ids;
// an id or a name over maxTrackedBytes is not kept.
func remember[V any](m map[string]V, k string, v V) {
	if name, ok := any(v).(string); len(k) > maxTrackedBytes || ok && len(name) > maxTrackedBytes {
		return
	}
	if len(m) >= maxTracked {
		clear(m)
	}
	m[k] = v
}

// assistant maps one assistant event (Claude Code sends one per content
// block): text and tool uses join the message being built.
func (p *claudeParser) assistant(raw json.RawMessage) ([]*proto.Object, bool) {
	return p.parts("assistant", raw, func(msgID string, part claudePart) ([]*proto.Object, bool) {
		switch part.Type {
		case "text":
			return p.addText(part.Text, p.streamed[msgID]), true
		case "tool_use":
			remember(p.names, part.ID, part.Name)
			return p.addCall(part.ID, part.Name, part.Input), true
		}
		return nil, false // thinking, redacted_thinking, server tools
	})
}

// user maps a user event: Claude Code reports each tool's result as a
// tool_result part of one.
func (p *claudeParser) user(raw json.RawMessage) ([]*proto.Object, bool) {
	return p.parts("user", raw, func(_ string, part claudePart) ([]*proto.Object, bool) {
		if part.Type != "tool_result" {
			return nil, false
		}
		return p.toolResult(part.ToolUseID, p.names[part.ToolUseID], contentText(part.Content), part.IsError), true
	})
}

// maxParts bounds the content parts of one message that are mapped:
// Claude Code sends an assistant message a block an event, and a few tool
// results in a user event. One 4 MiB line holds 1.4 million empty parts,
// each of which was a frame, all held until the line's last went out
// (four such lines took the server's peak memory up by 940 MiB); the
// parts past the bound are counted, and said in one log frame.
const maxParts = 1024

// parts maps each content part of a message with each (given the
// message's id); a part each does not map, or of another shape, is a log
// frame. Content that is not an array is not a message of this shape.
func (p *claudeParser) parts(kind string, raw json.RawMessage, each func(msgID string, part claudePart) ([]*proto.Object, bool)) ([]*proto.Object, bool) {
	var m claudeMessage
	if !decode(raw, &m) {
		return nil, false
	}
	var frames []*proto.Object
	n := 0
	shaped := isNull(m.Content) || jsonscan.Elements(m.Content, func(rawPart []byte) {
		if n++; n <= maxParts {
			frames = append(frames, p.part(kind, m.ID, rawPart, each)...)
		}
	})
	if !shaped {
		return nil, false
	}
	if n > maxParts {
		frames = append(frames, p.logf(kind, "ctxfs: %d more parts of a message dropped (at most %d are mapped)", n-maxParts, maxParts))
	}
	return frames, true
}

// part maps one content part with each, or keeps it in a log frame.
func (p *claudeParser) part(kind, msgID string, rawPart []byte, each func(msgID string, part claudePart) ([]*proto.Object, bool)) []*proto.Object {
	var part claudePart
	if decode(rawPart, &part) {
		if more, ok := each(msgID, part); ok {
			return more
		}
	}
	return []*proto.Object{p.logEvent(orDefault(part.Type, kind), rawPart)}
}

// result is the run's last event: usage, and the error when it failed.
func (p *claudeParser) result(ev claudeEvent) []*proto.Object {
	frames := p.flush()
	if ev.Usage != nil {
		frames = append(frames, usage(p.model, ev.Usage.InputTokens, ev.Usage.OutputTokens,
			"cache_read_input_tokens", ev.Usage.CacheReadTokens, "cache_creation_input_tokens", ev.Usage.CacheCreationTokens))
	}
	if !ev.IsError && !strings.HasPrefix(ev.Subtype, "error") {
		return frames
	}
	words := claudeWords(ev)
	return append(frames, p.fail(claudeErrno(ev, words), "%s", orDefault(words, ev.Subtype)))
}

// claudeWords is what a failed result says: its result, then its errors,
// joined with spaces, until they pass maxQuote, all that an error frame
// quotes. Joined whole, a line's million errors of one character each
// copied the words so far again at each one: some twenty minutes of a
// core for one line. They are read one at a time: decoded into a slice,
// four such lines took the server up by 131 MiB.
func claudeWords(ev claudeEvent) string {
	words := ev.Result
	jsonscan.Elements(ev.Errors, func(e []byte) {
		if len(words) <= maxQuote {
			words = strings.TrimSpace(words + " " + contentText(e))
		}
	})
	return words
}

// claudeErrno is the errno of a failed run: from the API's HTTP status
// when there is one, ENOENT for a session it could not resume, ELOOP for
// the turn limit (as for the built-in tools' step limit, SPEC 17).
func claudeErrno(ev claudeEvent, words string) syscall.Errno {
	var status int
	if json.Unmarshal(ev.APIErrorStatus, &status) == nil && status >= 100 {
		return modelapi.StatusErrno(status)
	}
	switch {
	case claudeUnknownSession().MatchString(words):
		return syscall.ENOENT
	case ev.Subtype == "error_max_turns":
		return syscall.ELOOP
	}
	return syscall.EIO
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
