package cli

import (
	"encoding/json"
	"strings"
	"syscall"

	"github.com/ctxfs/ctxfs/agent/modelapi"
	"github.com/ctxfs/ctxfs/proto"
)

// gemini is Google's Gemini CLI (@google/gemini-cli): `gemini
// --output-format stream-json` with the prompt on stdin, one event a line
// (init, message, tool_use, tool_result, error, result).
type gemini struct{}

func (gemini) Name() string    { return Gemini }
func (gemini) Program() string { return "gemini" }
func (gemini) Version() string { return "0.61.0" }

// geminiSettings choose the API-key login: with GOOGLE_GEMINI_BASE_URL
// set, Gemini CLI otherwise takes the "gateway" login, which a
// non-interactive run refuses ("Invalid auth method selected.", exit 41).
// Usage statistics are off: the run talks to the model's endpoint only.
const geminiSettings = `{"security":{"auth":{"selectedType":"gemini-api-key"}},"privacy":{"usageStatisticsEnabled":false}}` + "\n"

func (gemini) Invocation(o Options) (Invocation, error) {
	if err := checkResume(Gemini, o.Resume); err != nil {
		return Invocation{}, err
	}
	// --skip-trust: a headless run in a folder never trusted
	// interactively otherwise exits 55.
	args := []string{"--output-format", "stream-json", "--skip-trust"}
	if o.Model != "" {
		args = append(args, "--model", o.Model)
	}
	if o.Resume != "" {
		args = append(args, "--resume", o.Resume)
	}
	inv := Invocation{Args: args, KeyVar: "GEMINI_API_KEY",
		Files: []File{{Path: ".gemini/settings.json", Data: []byte(geminiSettings)}}}
	if o.BaseURL != "" {
		inv.Env = []string{"GOOGLE_GEMINI_BASE_URL=" + o.BaseURL}
	}
	return inv, nil
}

func (gemini) NewParser() Parser {
	return &geminiParser{run: run{cli: Gemini}, names: map[string]string{}}
}

// geminiUnknownSession is what Gemini CLI says on stderr of a --resume id
// it has no session for (exit 42, nothing on stdout): an unknown id, or
// any id from a directory with no sessions (its sessions are kept per
// project: the directory it runs in).
var geminiUnknownSession = lazyRegexp(`Invalid session identifier|No previous sessions found`)

type geminiParser struct {
	run
	model string
	names map[string]string // tool name of each call id
}

type geminiEvent struct {
	Type       string          `json:"type"`
	SessionID  string          `json:"session_id"`
	Model      string          `json:"model"`
	Role       string          `json:"role"`
	Content    string          `json:"content"`
	ToolName   string          `json:"tool_name"`
	ToolID     string          `json:"tool_id"`
	Parameters json.RawMessage `json:"parameters"`
	Status     string          `json:"status"`
	Output     string          `json:"output"`
	Error      *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
	Stats *struct {
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
		Cached       int64 `json:"cached"`
	} `json:"stats"`
}

func (p *geminiParser) Parse(line []byte) []*proto.Object { return p.parse(line, p.event) }

func (p *geminiParser) Finish(exit int, stderrTail []byte) ([]*proto.Object, string) {
	return p.finish(exit, stderrTail, geminiUnknownSession())
}

func (p *geminiParser) event(raw []byte) ([]*proto.Object, bool) {
	var ev geminiEvent
	if !decode(raw, &ev) {
		return nil, false
	}
	switch ev.Type {
	case "init":
		p.model = ev.Model
		return p.setSession(ev.SessionID), true
	case "message":
		if ev.Role == "assistant" {
			return p.addText(ev.Content, false), true
		}
		return nil, true // the user's input, which the engine records itself
	case "tool_use":
		remember(p.names, ev.ToolID, ev.ToolName)
		return p.addCall(ev.ToolID, ev.ToolName, ev.Parameters), true
	case "tool_result":
		content, isError := ev.Output, ev.Status == "error"
		if ev.Error != nil && content == "" {
			content = ev.Error.Message
		}
		return p.toolResult(ev.ToolID, p.names[ev.ToolID], content, isError), true
	case "result":
		return p.result(ev), true
	}
	// error events (warnings and recoverable errors: the result event
	// says how the run ended) and kinds this mapping does not know.
	return nil, false
}

func (p *geminiParser) result(ev geminiEvent) []*proto.Object {
	frames := p.flush()
	if s := ev.Stats; s != nil {
		frames = append(frames, usage(p.model, s.InputTokens, s.OutputTokens, "cached_input_tokens", s.Cached))
	}
	if ev.Status == "success" {
		return frames
	}
	msg := orDefault(ev.Status, "the run failed")
	if ev.Error != nil && ev.Error.Message != "" {
		msg = ev.Error.Message
	}
	return append(frames, p.fail(geminiErrno(msg), "%s", msg))
}

// geminiErrno reads the API error Gemini CLI quotes ("[API Error:
// {"error":{"code":400,…}}]"): the HTTP status it names, else EIO.
func geminiErrno(msg string) syscall.Errno {
	start, end := strings.IndexByte(msg, '{'), strings.LastIndexByte(msg, '}')
	if start < 0 || end < start {
		return syscall.EIO
	}
	var body struct {
		Error struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(msg[start:end+1]), &body) == nil && body.Error.Code >= 100 {
		return modelapi.StatusErrno(body.Error.Code)
	}
	return syscall.EIO
}
