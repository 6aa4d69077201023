package provider

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/ctxfs/ctxfs/agent/modelapi"
	"github.com/ctxfs/ctxfs/proto"
)

// openAI speaks OpenAI Chat Completions: POST {endpoint}/chat/completions,
// the endpoint being the base URL with its /v1 as the OpenAI SDK takes it.
type openAI struct {
	memo *settledMemo // the settled turns bodies are written with; nil: settledBodies
}

func (openAI) url(endpoint string) string {
	return strings.TrimRight(endpoint, "/") + "/chat/completions"
}

func (openAI) header(h http.Header, key string) {
	if key != "" {
		h.Set("Authorization", "Bearer "+key)
	}
}

type oaRequest struct {
	Model               string          `json:"model"`
	Messages            []oaMessage     `json:"messages"`
	Tools               []oaTool        `json:"tools,omitempty"` // the API refuses an empty list
	Stream              bool            `json:"stream"`
	StreamOptions       oaStreamOptions `json:"stream_options"`
	MaxTokens           int             `json:"max_tokens,omitempty"`
	MaxCompletionTokens int             `json:"max_completion_tokens,omitempty"`
	Temperature         *float64        `json:"temperature,omitempty"`

	settled func(w *body) bool // when set, writes the messages' elements instead of Messages
}

// oaTool is one tool offered, a function.
type oaTool struct {
	Type     string         `json:"type"` // "function"
	Function oaToolFunction `json:"function"`
}

type oaToolFunction struct {
	Name        string          `json:"name"` // as on the wire: fs_read
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"` // a JSON Schema object
}

type oaStreamOptions struct {
	IncludeUsage bool `json:"include_usage"` // the final chunk then carries usage
}

type oaMessage struct {
	Role       string       `json:"role"`
	Content    *string      `json:"content,omitempty"` // nil only for an assistant message that is all tool calls
	ToolCalls  []oaToolCall `json:"tool_calls,omitempty"`
	ToolCallID string       `json:"tool_call_id,omitempty"`
}

type oaToolCall struct {
	ID       string     `json:"id"`
	Type     string     `json:"type"` // "function"
	Function oaFunction `json:"function"`
}

type oaFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"` // JSON text, as a string
}

func (o openAI) body(cfg modelapi.Config, req modelapi.Request, tools offered) ([]byte, error) {
	r := o.frame(cfg, tools)
	r.settled = func(w *body) bool {
		return settledElements(o.memoOf(), w, modelapi.OpenAIChat, req, tools, nonEmpty, oaElements)
	}
	if b, err := r.marshal(len(req.System) + 256); err != errNotSettled { // settledElements makes room for the rest
		return b, err
	}
	r, err := o.request(cfg, req, tools)
	if err != nil {
		return nil, err
	}
	return r.marshal(textSize(req))
}

// request is the request of body, written afresh.
func (o openAI) request(cfg modelapi.Config, req modelapi.Request, tools offered) (*oaRequest, error) {
	turns, err := plan(req.Turns, tools, nonEmpty)
	if err != nil {
		return nil, err
	}
	r := o.frame(cfg, tools)
	r.Messages = oaMessages(req.System, turns)
	return r, nil
}

// nonEmpty is OpenAI's rule for a call id: any but none.
func nonEmpty(id string) bool { return id != "" }

// frame is a request without its messages.
func (openAI) frame(cfg modelapi.Config, tools offered) *oaRequest {
	r := oaRequest{
		Model:         cfg.ModelID,
		Tools:         oaTools(tools.tools),
		Stream:        true,
		StreamOptions: oaStreamOptions{IncludeUsage: true},
		Temperature:   cfg.Temperature,
	}
	if wantsMaxCompletionTokens(cfg.ModelID) {
		r.MaxCompletionTokens = cfg.MaxTokens
	} else {
		r.MaxTokens = cfg.MaxTokens
	}
	return &r
}

// wantsMaxCompletionTokens says whether a model takes its output bound as
// max_completion_tokens. OpenAI's reference marks max_tokens deprecated and
// not supported by its o-series reasoning models (o1, o3, o3-mini,
// o4-mini, …) and the GPT-5 series, which refuse a request that carries it
// (400 unsupported_parameter); its older models (gpt-4o, gpt-4.1, …) take
// either. The servers that speak this API for other models (Ollama, vLLM,
// llama.cpp, gateways) are not all sure to know the newer field, so only
// those families get it. The family is read from the model id's last path
// segment, so that a gateway's "openai/o3" counts too.
func wantsMaxCompletionTokens(modelID string) bool {
	id := strings.ToLower(modelID)
	if i := strings.LastIndexByte(id, '/'); i >= 0 {
		id = id[i+1:]
	}
	if strings.HasPrefix(id, "gpt-5") {
		return true
	}
	// o1, o3-mini, o4-mini-high, o1-preview-2024-09-12, …: "o" and a digit.
	return len(id) >= 2 && id[0] == 'o' && id[1] >= '0' && id[1] <= '9'
}

// oaTools is the tools offered, in OpenAI's format.
func oaTools(tools []modelapi.Tool) []oaTool {
	var out []oaTool
	for _, t := range tools {
		out = append(out, oaTool{Type: "function",
			Function: oaToolFunction{Name: wireName(t.Name), Description: t.Description, Parameters: schema(t)}})
	}
	return out
}

// oaElements is the elementWriter of OpenAI's messages.
func oaElements(w *body, system string, turns []planned, first, _ bool) {
	if !first {
		system = ""
	}
	msgs := oaMessages(system, turns)
	for i := range msgs {
		w.element()
		msgs[i].write(w)
	}
}

// oaMessages renders the system prompt and the planned turns. OpenAI takes
// consecutive messages of one role as they are, so nothing is merged.
func oaMessages(system string, turns []planned) []oaMessage {
	out := make([]oaMessage, 0, len(turns)+1)
	if system != "" {
		out = append(out, oaMessage{Role: "system", Content: &system})
	}
	texts := make([]string, len(turns)) // the contents, in one allocation
	for i, p := range turns {
		m := oaMessage{Role: p.role}
		text := &texts[i]
		*text = p.text
		switch p.role {
		case modelapi.RoleAssistant:
			for _, c := range p.calls {
				m.ToolCalls = append(m.ToolCalls, oaToolCall{ID: c.ID, Type: "function",
					Function: oaFunction{Name: wireName(c.Name), Arguments: string(argsObject(c.Arguments))}})
			}
		case modelapi.RoleTool:
			m.ToolCallID, *text = p.result.ToolCallID, resultText(*p.result)
		}
		if *text != "" || len(m.ToolCalls) == 0 {
			m.Content = text
		}
		out = append(out, m)
	}
	return out
}

// oaChunk is one streamed chunk. The final one (with include_usage) has
// no choices and carries usage; an error may arrive as a chunk too.
type oaChunk struct {
	Choices []struct {
		Delta struct {
			Content   string        `json:"content"`
			ToolCalls []oaCallPiece `json:"tool_calls"`
		} `json:"delta"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// oaCallPiece is a fragment of a streamed tool call: the first of a call
// carries its index, id and name, the rest pieces of its arguments.
type oaCallPiece struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func (openAI) decoder(tools offered) decoder { return &oaDecoder{tools: tools} }

type oaDecoder struct {
	res   modelapi.Result
	tools offered
	calls calls
	last  int // the index of the latest fragment, for servers that send none
}

// event handles one "data:" event; "data: [DONE]" ends the stream.
func (d *oaDecoder) event(ev sseEvent) (string, bool, error) {
	if strings.TrimSpace(ev.Data) == "[DONE]" {
		return "", true, nil
	}
	var ch oaChunk
	if err := json.Unmarshal([]byte(ev.Data), &ch); err != nil {
		return "", false, malformed(err)
	}
	if len(ch.Error) > 0 && string(ch.Error) != "null" {
		return "", false, eventError(ev.Data)
	}
	if ch.Usage != nil {
		d.res.InputTokens, d.res.OutputTokens = tokens(ch.Usage.PromptTokens), tokens(ch.Usage.CompletionTokens)
	}
	if len(ch.Choices) == 0 {
		return "", false, nil
	}
	if r := ch.Choices[0].FinishReason; r != "" {
		d.res.StopReason = r
	}
	for _, p := range ch.Choices[0].Delta.ToolCalls {
		if err := d.callPiece(p); err != nil {
			return "", false, err
		}
	}
	return ch.Choices[0].Delta.Content, false, nil
}

// tokens is a count the provider reported, clamped to [0, proto.MaxTokens]:
// what a hostile provider reports cannot make a total wrap.
func tokens(n int) int { return int(proto.ClampTokens(int64(n))) }

// callPiece adds a fragment to its call. A fragment starts a call when its
// index is new, or when it carries an id other than the call's at that
// index (servers that number every call 0, each sent whole). A later name
// piece is appended unless it repeats the name held (servers differ on
// whether they split names or repeat them).
func (d *oaDecoder) callPiece(p oaCallPiece) error {
	if p.Index != nil {
		d.last = *p.Index
	}
	call := d.calls.at(d.last)
	if call == nil || p.ID != "" && p.ID != call.id {
		var err error
		if call, err = d.calls.start(d.last, p.ID, p.Function.Name); err != nil {
			return err
		}
	} else if n := p.Function.Name; n != "" && n != call.name {
		if err := d.calls.addName(call, n); err != nil {
			return err
		}
	}
	return d.calls.addArgs(call, p.Function.Arguments)
}

func (d *oaDecoder) result() modelapi.Result {
	d.res.ToolCalls = d.calls.result(d.tools)
	return d.res
}
