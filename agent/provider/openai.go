package provider

import (
	"encoding/json"
	"net/http"
	"strings"
)

// openAI speaks OpenAI Chat Completions: POST {endpoint}/chat/completions,
// the endpoint being the base URL with its /v1 as the OpenAI SDK takes it.
type openAI struct{}

func (openAI) url(endpoint string) string {
	return strings.TrimRight(endpoint, "/") + "/chat/completions"
}

func (openAI) header(h http.Header, key string) {
	if key != "" {
		h.Set("Authorization", "Bearer "+key)
	}
}

type oaRequest struct {
	Model         string          `json:"model"`
	Messages      []oaMessage     `json:"messages"`
	Stream        bool            `json:"stream"`
	StreamOptions oaStreamOptions `json:"stream_options"`
	MaxTokens     int             `json:"max_tokens,omitempty"`
	Temperature   *float64        `json:"temperature,omitempty"`
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

func (openAI) body(cfg Config, req Request) ([]byte, error) {
	turns, err := plan(req.Turns, func(id string) bool { return id != "" })
	if err != nil {
		return nil, err
	}
	return json.Marshal(oaRequest{
		Model:         cfg.ModelID,
		Messages:      oaMessages(req.System, turns),
		Stream:        true,
		StreamOptions: oaStreamOptions{IncludeUsage: true},
		MaxTokens:     cfg.MaxTokens,
		Temperature:   cfg.Temperature,
	})
}

// oaMessages renders the system prompt and the planned turns. OpenAI takes
// consecutive messages of one role as they are, so nothing is merged.
func oaMessages(system string, turns []planned) []oaMessage {
	var out []oaMessage
	if system != "" {
		out = append(out, oaMessage{Role: "system", Content: &system})
	}
	for _, p := range turns {
		m := oaMessage{Role: p.role}
		text := p.text
		switch p.role {
		case RoleAssistant:
			for _, c := range p.calls {
				m.ToolCalls = append(m.ToolCalls, oaToolCall{ID: c.ID, Type: "function",
					Function: oaFunction{Name: c.Name, Arguments: string(argsObject(c.Arguments))}})
			}
		case RoleTool:
			m.ToolCallID, text = p.result.ToolCallID, resultText(p.result)
		}
		if text != "" || len(m.ToolCalls) == 0 {
			m.Content = &text
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
			Content string `json:"content"`
		} `json:"delta"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

func (openAI) decoder() decoder { return &oaDecoder{} }

type oaDecoder struct{ res Result }

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
		d.res.InputTokens, d.res.OutputTokens = ch.Usage.PromptTokens, ch.Usage.CompletionTokens
	}
	if len(ch.Choices) == 0 {
		return "", false, nil
	}
	if r := ch.Choices[0].FinishReason; r != "" {
		d.res.StopReason = r
	}
	return ch.Choices[0].Delta.Content, false, nil
}

func (d *oaDecoder) result() Result { return d.res }
