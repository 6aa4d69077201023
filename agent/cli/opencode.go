package cli

import (
	"encoding/json"
	"net/url"
	"strings"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/modelapi"
	"github.com/ctxfs/ctxfs/proto"
)

// openCode is opencode (opencode-ai): `opencode run --format json` with
// the prompt on stdin, one event a line (step_start, text, reasoning,
// tool_use, step_finish, error), each carrying the session's id.
type openCode struct{}

func (openCode) Name() string    { return OpenCode }
func (openCode) Program() string { return "opencode" }
func (openCode) Version() string { return "1.18.33" }

// openCodeKeys are the providers an Invocation can point at a base URL,
// with the variable each reads its key from.
var openCodeKeys = map[string]string{"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}

// openCodeDefault is the model when the definition names none.
const openCodeDefault = "anthropic/claude-sonnet-4-5"

func (openCode) Invocation(o Options) (Invocation, error) {
	if err := checkResume(OpenCode, o.Resume); err != nil {
		return Invocation{}, err
	}
	model := orDefault(o.Model, openCodeDefault)
	prov, _, _ := strings.Cut(model, "/")
	keyVar, ok := openCodeKeys[prov]
	if !ok || strings.ContainsAny(model, "\"\\\n\r\x00") || strings.HasPrefix(model, "-") {
		return Invocation{}, abi.Errorf(syscall.EINVAL, OpenCode, "model %q is not anthropic/NAME or openai/NAME", truncate(model, 64))
	}
	args := []string{"run", "--format", "json", "--model", model}
	if o.Resume != "" {
		args = append(args, "--session", o.Resume)
	}
	// No update check and no download of the models.dev catalogue: the
	// run talks to the model's endpoint only.
	inv := Invocation{Args: args, KeyVar: keyVar, Env: []string{"OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_MODELS_FETCH=1"}}
	if o.BaseURL != "" {
		conf, err := openCodeConfig(prov, o.BaseURL)
		if err != nil {
			return Invocation{}, err
		}
		inv.Files = []File{{Path: ".config/opencode/opencode.json", Data: conf}}
	}
	return inv, nil
}

// openCodeConfig sends prov's requests to baseURL; sharing and updates
// off. The key is read from the provider's own variable, not written.
func openCodeConfig(prov, baseURL string) ([]byte, error) {
	if u, err := url.Parse(baseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, abi.Errorf(syscall.EINVAL, OpenCode, "base URL %q is not an http(s) URL", truncate(baseURL, 128))
	}
	conf := map[string]any{
		"$schema":    "https://opencode.ai/config.json",
		"autoupdate": false,
		"share":      "disabled",
		"provider":   map[string]any{prov: map[string]any{"options": map[string]string{"baseURL": baseURL}}},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	return append(b, '\n'), err
}

func (openCode) NewParser() Parser { return &openCodeParser{run: run{cli: OpenCode}} }

// openCodeUnknownSession is what `opencode run --session ID` says on
// stderr of an id it has no session for (exit 1, nothing on stdout).
var openCodeUnknownSession = lazyRegexp(`Session not found`)

type openCodeParser struct{ run }

type openCodeEvent struct {
	Type      string          `json:"type"`
	SessionID string          `json:"sessionID"`
	Part      json.RawMessage `json:"part"`
	Error     json.RawMessage `json:"error"`
}

type openCodePart struct {
	Type   string `json:"type"`
	Text   string `json:"text"`
	Tool   string `json:"tool"`
	CallID string `json:"callID"`
	State  struct {
		Status string          `json:"status"`
		Input  json.RawMessage `json:"input"`
		Output string          `json:"output"`
		Error  string          `json:"error"`
	} `json:"state"`
	Tokens *struct {
		Input     int64 `json:"input"`
		Output    int64 `json:"output"`
		Reasoning int64 `json:"reasoning"`
		Cache     struct {
			Read  int64 `json:"read"`
			Write int64 `json:"write"`
		} `json:"cache"`
	} `json:"tokens"`
}

func (p *openCodeParser) Parse(line []byte) []*proto.Object { return p.parse(line, p.event) }

func (p *openCodeParser) Finish(exit int, stderrTail []byte) ([]*proto.Object, string) {
	return p.finish(exit, stderrTail, openCodeUnknownSession())
}

func (p *openCodeParser) event(raw []byte) ([]*proto.Object, bool) {
	var ev openCodeEvent
	var part openCodePart
	if !decode(raw, &ev) || (len(ev.Part) > 0 && !decode(ev.Part, &part)) {
		return nil, false
	}
	frames := p.setSession(ev.SessionID)
	switch ev.Type {
	case "step_start":
		return frames, true
	case "text":
		return append(frames, p.addText(part.Text, false)...), true
	case "tool_use":
		return append(frames, p.tool(part)...), true
	case "step_finish":
		frames = append(frames, p.flush()...)
		if t := part.Tokens; t != nil {
			frames = append(frames, usage("", t.Input, t.Output, "reasoning_tokens", t.Reasoning,
				"cache_read_input_tokens", t.Cache.Read, "cache_creation_input_tokens", t.Cache.Write))
		}
		return frames, true
	case "error":
		return append(append(frames, p.flush()...), p.openCodeError(ev.Error)), true
	}
	// reasoning, and kinds this mapping does not know.
	return append(frames, p.logEvent(ev.Type, raw)), true
}

// tool maps a tool part: opencode reports it finished (in run's json
// output), so it is both the call and its result; an unfinished one is the
// call alone, its result in a later report.
func (p *openCodeParser) tool(part openCodePart) []*proto.Object {
	frames := p.callOnce(part.CallID, part.Tool, part.State.Input)
	switch part.State.Status {
	case "completed":
		return append(frames, p.toolResult(part.CallID, part.Tool, part.State.Output, false)...)
	case "error":
		return append(frames, p.toolResult(part.CallID, part.Tool, part.State.Error, true)...)
	}
	return frames // pending or running: its result comes in a later event
}

// openCodeError is the error frame of an error event: the API's HTTP
// status when it names one, else EIO.
func (p *openCodeParser) openCodeError(raw json.RawMessage) *proto.Object {
	var e struct {
		Name string `json:"name"`
		Data struct {
			Message    string `json:"message"`
			StatusCode int    `json:"statusCode"`
		} `json:"data"`
	}
	decode(raw, &e)
	errno := syscall.EIO
	if e.Data.StatusCode >= 100 {
		errno = modelapi.StatusErrno(e.Data.StatusCode)
	}
	return p.fail(errno, "%s", orDefault(strings.TrimSpace(e.Name+": "+e.Data.Message), "error"))
}
