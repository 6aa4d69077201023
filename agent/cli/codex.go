package cli

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/modelapi"
	"github.com/ctxfs/ctxfs/proto"
)

// codex is OpenAI's Codex CLI (@openai/codex): `codex exec --json`, one
// event a line (thread.*, turn.*, item.*, error), the work of a turn as
// items (agent_message, reasoning, command_execution, file_change,
// mcp_tool_call, web_search, todo_list, error).
type codex struct{}

func (codex) Name() string    { return Codex }
func (codex) Program() string { return "codex" }
func (codex) Version() string { return "0.171.0" }

// codexProvider is the model provider entry an Invocation with a BaseURL
// writes: Codex takes its endpoint only from config.toml (it ignores
// OPENAI_BASE_URL), and the key from the variable env_key names.
const codexProvider = "ctxfs"

func (codex) Invocation(o Options) (Invocation, error) {
	if err := checkResume(Codex, o.Resume); err != nil {
		return Invocation{}, err
	}
	// No shell snapshot: Codex writes one under HOME/.codex/shell_snapshots
	// with the login shell's exported variables, its key among them (seen
	// with HOME on the mount), and HOME is in the store.
	args := []string{"exec", "--json", "--skip-git-repo-check", "-c", "features.shell_snapshot=false"}
	if o.Model != "" {
		args = append(args, "--model", o.Model)
	}
	if o.Resume != "" {
		args = append(args, "resume", o.Resume)
	}
	args = append(args, "-") // the prompt is stdin
	inv := Invocation{Args: args, KeyVar: "OPENAI_API_KEY"}
	if o.BaseURL != "" {
		conf, err := codexConfig(o.BaseURL, o.Model)
		if err != nil {
			return Invocation{}, err
		}
		inv.Files = []File{{Path: ".codex/config.toml", Data: conf}}
	}
	return inv, nil
}

// codexConfig is a config.toml that sends Codex to baseURL over the
// Responses API. The URL is checked to be one, and written as a TOML
// basic string (strconv's quoting of a URL is one).
func codexConfig(baseURL, model string) ([]byte, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.ContainsAny(baseURL, "\"\\\n\r\x00") {
		return nil, abi.Errorf(syscall.EINVAL, Codex, "base URL %q is not an http(s) URL", truncate(baseURL, 128))
	}
	var b strings.Builder
	if model != "" {
		if strings.ContainsAny(model, "\"\\\n\r\x00") {
			return nil, abi.Errorf(syscall.EINVAL, Codex, "model %q has characters a config cannot carry", truncate(model, 64))
		}
		fmt.Fprintf(&b, "model = %s\n", strconv.Quote(model))
	}
	fmt.Fprintf(&b, "model_provider = %q\n\n[model_providers.%s]\nname = %q\nbase_url = %s\nenv_key = \"OPENAI_API_KEY\"\nwire_api = \"responses\"\n",
		codexProvider, codexProvider, codexProvider, strconv.Quote(baseURL))
	return []byte(b.String()), nil
}

func (codex) NewParser() Parser { return &codexParser{run: run{cli: Codex}} }

// codexUnknownSession is what `codex exec resume ID` says on stderr of an
// id it has no rollout for (exit 1, nothing on stdout).
var codexUnknownSession = lazyRegexp(`no rollout found for thread id`)

type codexParser struct {
	run
	// lastError is the last error event's words, for a CLI that exits
	// without a turn.failed.
	lastError string
}

type codexEvent struct {
	Type     string          `json:"type"`
	ThreadID string          `json:"thread_id"`
	Message  string          `json:"message"`
	Item     json.RawMessage `json:"item"`
	Usage    *struct {
		InputTokens       int64 `json:"input_tokens"`
		CachedInputTokens int64 `json:"cached_input_tokens"`
		OutputTokens      int64 `json:"output_tokens"`
		ReasoningTokens   int64 `json:"reasoning_output_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

type codexItem struct {
	ID               string          `json:"id"`
	Type             string          `json:"type"`
	Text             string          `json:"text"`
	Command          string          `json:"command"`
	AggregatedOutput string          `json:"aggregated_output"`
	ExitCode         *int            `json:"exit_code"`
	Status           string          `json:"status"`
	Changes          json.RawMessage `json:"changes"`
	Server           string          `json:"server"`
	Tool             string          `json:"tool"`
	Arguments        json.RawMessage `json:"arguments"`
	Result           json.RawMessage `json:"result"`
	Error            json.RawMessage `json:"error"`
	Query            string          `json:"query"`
}

func (p *codexParser) Parse(line []byte) []*proto.Object { return p.parse(line, p.event) }

func (p *codexParser) Finish(exit int, stderrTail []byte) ([]*proto.Object, string) {
	var frames []*proto.Object
	if exit != 0 && !p.errored && p.lastError != "" {
		frames = append(p.flush(), p.codexError(p.lastError))
	}
	more, status := p.finish(exit, stderrTail, codexUnknownSession())
	return append(frames, more...), status
}

func (p *codexParser) event(raw []byte) ([]*proto.Object, bool) {
	var ev codexEvent
	if !decode(raw, &ev) {
		return nil, false
	}
	switch ev.Type {
	case "thread.started":
		return p.setSession(ev.ThreadID), true
	case "turn.started":
		return nil, true
	case "item.started", "item.updated", "item.completed":
		return p.item(ev.Type, ev.Item)
	case "turn.completed":
		frames := p.flush()
		if u := ev.Usage; u != nil {
			// Codex counts the whole thread: a resumed run's usage
			// includes the runs before it (thread_total).
			frames = append(frames, usage("", u.InputTokens, u.OutputTokens,
				"cached_input_tokens", u.CachedInputTokens, "reasoning_output_tokens", u.ReasoningTokens, "thread_total", true))
		}
		return frames, true
	case "turn.failed":
		msg := p.lastError
		if ev.Error != nil && ev.Error.Message != "" {
			msg = ev.Error.Message
		}
		return append(p.flush(), p.codexError(orDefault(msg, "the turn failed"))), true
	case "error":
		// Retries ("Reconnecting... 1/5") and the last error, which
		// turn.failed repeats: kept as log events.
		p.lastError = truncate(ev.Message, maxQuote)
		return []*proto.Object{p.logEvent(ev.Type, raw)}, true
	}
	return nil, false
}

// codexError is the error frame of Codex's words: an API error body when
// it quotes one (its type gives the errno), else EIO.
func (p *codexParser) codexError(msg string) *proto.Object {
	if e, ok := modelapi.ParseAPIError([]byte(msg)); ok {
		return p.fail(e.Errno(), "%s", e.Error())
	}
	return p.fail(syscall.EIO, "%s", msg)
}

// item maps one item event. Tool items become a tool_call when they start
// (or when they complete, if their start was not seen) and a tool_result
// when they complete; item.updated repeats state that item.completed
// gives whole.
func (p *codexParser) item(kind string, raw json.RawMessage) ([]*proto.Object, bool) {
	var it codexItem
	if !decode(raw, &it) {
		return nil, false
	}
	switch it.Type {
	case "agent_message":
		if kind == "item.completed" {
			return p.addText(it.Text, false), true
		}
		return nil, true
	case "command_execution", "file_change", "mcp_tool_call", "web_search":
		if kind == "item.updated" {
			return nil, true
		}
		return p.toolItem(kind, it), true
	}
	// reasoning, todo_list, error items (warnings: the turn goes on), and
	// kinds this mapping does not know.
	return []*proto.Object{p.logEvent(it.Type, raw)}, true
}

func (p *codexParser) toolItem(kind string, it codexItem) []*proto.Object {
	name, args := codexCall(it)
	frames := p.callOnce(it.ID, name, args)
	if kind != "item.completed" {
		return frames
	}
	content, isError := codexResult(it)
	return append(frames, p.toolResult(it.ID, name, content, isError)...)
}

// codexCall is an item's tool name and arguments: the item type, and the
// fields that say what was asked (an MCP call is named server.tool).
func codexCall(it codexItem) (string, json.RawMessage) {
	switch it.Type {
	case "command_execution":
		return it.Type, mustJSON(map[string]string{"command": it.Command})
	case "file_change":
		return it.Type, mustJSON(map[string]json.RawMessage{"changes": orNull(it.Changes)})
	case "mcp_tool_call":
		return it.Server + "." + it.Tool, it.Arguments
	}
	return it.Type, mustJSON(map[string]string{"query": it.Query})
}

// codexResult is a completed item's output and whether it failed.
func codexResult(it codexItem) (string, bool) {
	failed := it.Status == "failed" || it.Status == "declined" || (it.ExitCode != nil && *it.ExitCode != 0)
	switch it.Type {
	case "command_execution":
		return it.AggregatedOutput, failed
	case "mcp_tool_call":
		if !isNull(it.Error) {
			return contentText(it.Error), true
		}
		return contentText(it.Result), failed
	}
	return it.Status, failed
}

func orNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

// mustJSON marshals a value that always marshals (maps of strings and raw
// JSON already checked valid by the decoder).
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage("{}")
	}
	return b
}
