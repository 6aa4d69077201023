package provider

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"unicode"

	"github.com/ctxfs/ctxfs/agent/modelapi"
)

// anthropic speaks Anthropic Messages: POST {endpoint}/v1/messages, the
// endpoint being the base URL without /v1 as the Anthropic SDK takes it
// (one that already ends in /v1 is taken as it is).
type anthropic struct {
	memo *settledMemo // the settled turns bodies are written with; nil: settledBodies
}

func (anthropic) url(endpoint string) string {
	base := strings.TrimRight(endpoint, "/")
	if !strings.HasSuffix(base, "/v1") {
		base += "/v1"
	}
	return base + "/messages"
}

func (anthropic) header(h http.Header, key string) {
	if key != "" {
		h.Set("x-api-key", key)
	}
	h.Set("anthropic-version", AnthropicVersion)
}

type anRequest struct {
	Model       string      `json:"model"`
	MaxTokens   int         `json:"max_tokens"`
	System      string      `json:"system,omitempty"`
	Messages    []anMessage `json:"messages"`
	Tools       []anTool    `json:"tools,omitempty"`
	Stream      bool        `json:"stream"`
	Temperature *float64    `json:"temperature,omitempty"`

	settled func(w *body) bool // when set, writes the messages' elements instead of Messages
}

// anTool is one tool offered.
type anTool struct {
	Name        string          `json:"name"` // as on the wire: fs_read
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"` // a JSON Schema object
}

type anMessage struct {
	Role    string    `json:"role"` // "user" or "assistant"
	Content []anBlock `json:"content"`
}

// anBlock is a text, tool_use or tool_result content block.
type anBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"` // text: never empty, the API refuses empty text blocks
	ID        string          `json:"id,omitempty"`   // tool_use
	Name      string          `json:"name,omitempty"` // tool_use
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"` // tool_result
	Content   string          `json:"content,omitempty"`     // tool_result
	IsError   bool            `json:"is_error,omitempty"`    // tool_result
}

// Anthropic refuses empty messages and empty text blocks, and wants the
// first message to be the user's: these texts stand in.
const (
	placeholder = "(empty)"     // for a message that would be empty
	opening     = "(continued)" // before a conversation that starts with the assistant
)

func (a anthropic) body(cfg modelapi.Config, req modelapi.Request, tools offered) ([]byte, error) {
	r := a.frame(cfg, req, tools)
	r.settled = func(w *body) bool {
		return settledElements(a.memoOf(), w, modelapi.AnthropicMessages, req, tools, idChars, anElements)
	}
	if b, err := r.marshal(len(req.System) + 256); err != errNotSettled { // settledElements makes room for the rest
		return b, err
	}
	r, err := a.request(cfg, req, tools)
	if err != nil {
		return nil, err
	}
	return r.marshal(textSize(req))
}

// request is the request of body, written afresh.
func (a anthropic) request(cfg modelapi.Config, req modelapi.Request, tools offered) (*anRequest, error) {
	turns, err := plan(req.Turns, tools, idChars) // tool_use ids must match ^[a-zA-Z0-9_-]+$
	if err != nil {
		return nil, err
	}
	r := a.frame(cfg, req, tools)
	r.Messages = anMessages(turns, true, true)
	return r, nil
}

// frame is a request without its messages.
func (anthropic) frame(cfg modelapi.Config, req modelapi.Request, tools offered) *anRequest {
	maxTokens := cfg.MaxTokens
	if maxTokens == 0 {
		maxTokens = modelapi.DefaultAnthropicMaxTokens
	}
	return &anRequest{
		Model:       cfg.ModelID,
		MaxTokens:   maxTokens,
		System:      req.System,
		Tools:       anTools(tools.tools),
		Stream:      true,
		Temperature: cfg.Temperature,
	}
}

// anTools is the tools offered, in Anthropic's format.
func anTools(tools []modelapi.Tool) []anTool {
	var out []anTool
	for _, t := range tools {
		out = append(out, anTool{Name: wireName(t.Name), Description: t.Description, InputSchema: schema(t)})
	}
	return out
}

// anElements is the elementWriter of Anthropic's messages.
func anElements(w *body, _ string, turns []planned, first, final bool) {
	msgs := anMessages(turns, first, final)
	for i := range msgs {
		w.element()
		msgs[i].write(w)
	}
}

// anMessages renders the planned turns as the alternating user and
// assistant messages Anthropic requires, starting with a user message
// when they are the first (the opening stands in for one) and with a
// final assistant message trimmed when they end the conversation. The
// blocks of consecutive turns of one role merge into one message, so
// each message's blocks are a run of one array of all blocks.
func anMessages(turns []planned, first, final bool) []anMessage {
	all := make([]anBlock, 0, len(turns))
	out := make([]anMessage, 0, len(turns)+1)
	starts := make([]int, 0, len(turns)+1) // each message's first block in all
	for _, p := range turns {
		start := len(all)
		var role string
		role, all = appendBlocks(all, p)
		if n := len(out); n == 0 || out[n-1].Role != role {
			out, starts = append(out, anMessage{Role: role}), append(starts, start)
		}
	}
	for i := range out {
		end := len(all)
		if i+1 < len(out) {
			end = starts[i+1]
		}
		if end > starts[i] {
			out[i].Content = all[starts[i]:end:end]
		}
	}
	if first && len(out) > 0 && out[0].Role != modelapi.RoleUser {
		out = append([]anMessage{{Role: modelapi.RoleUser, Content: []anBlock{{Type: "text", Text: opening}}}}, out...)
	}
	if final {
		out = trimFinalAssistant(out)
	}
	for i := range out {
		resultsFirst(out[i].Content)
		if len(out[i].Content) == 0 {
			out[i].Content = []anBlock{{Type: "text", Text: placeholder}}
		}
	}
	return out
}

// appendBlocks appends one planned turn's blocks and says its role; a
// tool result is user content.
func appendBlocks(blocks []anBlock, p planned) (string, []anBlock) {
	if p.role == modelapi.RoleTool {
		r := p.result
		return modelapi.RoleUser, append(blocks, anBlock{Type: "tool_result", ToolUseID: r.ToolCallID, Content: r.Text, IsError: r.IsError})
	}
	if p.text != "" {
		blocks = append(blocks, anBlock{Type: "text", Text: p.text})
	}
	if p.role == modelapi.RoleAssistant {
		for _, c := range p.calls {
			blocks = append(blocks, anBlock{Type: "tool_use", ID: c.ID, Name: wireName(c.Name), Input: argsObject(c.Arguments)})
		}
		return modelapi.RoleAssistant, blocks
	}
	return modelapi.RoleUser, blocks
}

// resultsFirst moves tool_result blocks before the other blocks of a user
// message: the API wants a message that answers tool calls to begin with
// its results, and a loose result or a user turn merged after them must
// not come between.
func resultsFirst(blocks []anBlock) {
	if len(blocks) < 2 {
		return
	}
	slices.SortStableFunc(blocks, func(a, b anBlock) int {
		return rank(b) - rank(a)
	})
}

// rank orders blocks for resultsFirst: 1 for a tool_result, 0 for the rest.
func rank(b anBlock) int {
	if b.Type == "tool_result" {
		return 1
	}
	return 0
}

// trimFinalAssistant trims trailing white space from a final assistant
// message (the API refuses it there, where it is the start of the reply)
// and drops the message if nothing is left.
func trimFinalAssistant(msgs []anMessage) []anMessage {
	n := len(msgs)
	if n == 0 || msgs[n-1].Role != modelapi.RoleAssistant {
		return msgs
	}
	m := &msgs[n-1]
	if last := len(m.Content) - 1; last >= 0 && m.Content[last].Type == "text" {
		m.Content[last].Text = strings.TrimRightFunc(m.Content[last].Text, unicode.IsSpace)
		if m.Content[last].Text == "" {
			m.Content = m.Content[:last]
		}
	}
	if len(m.Content) == 0 {
		return msgs[:n-1]
	}
	return msgs
}

// anEvent is one streamed event, of any type: only the fields this
// package reads.
type anEvent struct {
	Type    string `json:"type"`
	Message *struct {
		Usage anUsage `json:"usage"`
	} `json:"message"`
	Index        int `json:"index"` // content_block_*: the block's
	ContentBlock struct {
		Type string `json:"type"`
		ID   string `json:"id"`   // tool_use
		Name string `json:"name"` // tool_use
	} `json:"content_block"` // content_block_start
	Delta struct {
		Type        string `json:"type"`
		Text        string `json:"text"`         // text_delta
		PartialJSON string `json:"partial_json"` // input_json_delta
		StopReason  string `json:"stop_reason"`
	} `json:"delta"`
	Usage *anUsage `json:"usage"`
}

type anUsage struct {
	InputTokens              int `json:"input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	OutputTokens             int `json:"output_tokens"`
}

func (anthropic) decoder(tools offered) decoder { return &anDecoder{tools: tools} }

type anDecoder struct {
	res   modelapi.Result
	tools offered
	calls calls // keyed by content block index
}

// event handles one event; message_stop ends the stream. Unknown event
// types are ignored, as Anthropic's versioning policy asks.
func (d *anDecoder) event(ev sseEvent) (string, bool, error) {
	var e anEvent
	if err := json.Unmarshal([]byte(ev.Data), &e); err != nil {
		return "", false, malformed(err)
	}
	typ := e.Type
	if typ == "" {
		typ = ev.Name
	}
	switch typ {
	case "message_start":
		if e.Message != nil {
			d.usage(e.Message.Usage)
		}
	case "content_block_start":
		if e.ContentBlock.Type == "tool_use" {
			_, err := d.calls.start(e.Index, e.ContentBlock.ID, e.ContentBlock.Name)
			return "", false, err
		}
	case "content_block_delta":
		switch e.Delta.Type {
		case "text_delta":
			return e.Delta.Text, false, nil
		case "input_json_delta":
			return "", false, d.argsPiece(e.Index, e.Delta.PartialJSON)
		}
	case "message_delta":
		if e.Delta.StopReason != "" {
			d.res.StopReason = e.Delta.StopReason
		}
		if e.Usage != nil {
			d.usage(*e.Usage)
		}
	case "message_stop":
		return "", true, nil
	case "error":
		return "", false, eventError(ev.Data)
	}
	return "", false, nil
}

// usage takes the counts an event carries. Input counts cached tokens
// too: input_tokens alone leaves out what was read from or written to
// the prompt cache, which is still input the model processed. Counts are
// cumulative, so a later non-zero count replaces an earlier one; each is
// clamped (tokens).
func (d *anDecoder) usage(u anUsage) {
	// Each clamped first: their sum is then far from wrapping.
	if in := tokens(tokens(u.InputTokens) + tokens(u.CacheCreationInputTokens) + tokens(u.CacheReadInputTokens)); in > 0 {
		d.res.InputTokens = in
	}
	if out := tokens(u.OutputTokens); out > 0 {
		d.res.OutputTokens = out
	}
}

// argsPiece adds a piece of a tool_use block's input. The block's start
// carries an input too, always {} when streamed: the input is the pieces.
// Pieces of other blocks (a server tool's input) are not calls for the
// caller to run, and are dropped.
func (d *anDecoder) argsPiece(index int, piece string) error {
	if call := d.calls.at(index); call != nil {
		return d.calls.addArgs(call, piece)
	}
	return nil
}

func (d *anDecoder) result() modelapi.Result {
	d.res.ToolCalls = d.calls.result(d.tools)
	return d.res
}
