package modelapi

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
)

// The API names a model definition's api file may hold.
const (
	OpenAIChat        = "openai-chat"
	AnthropicMessages = "anthropic-messages"
)

const (
	// DefaultIdleTimeout bounds silence when Config.IdleTimeout is 0: long
	// enough for a large model's first token, short enough that a hung
	// server does not hold a run forever.
	DefaultIdleTimeout = 120 * time.Second
	// DefaultAnthropicMaxTokens is sent when Config.MaxTokens is 0:
	// Anthropic requires max_tokens, OpenAI does not.
	DefaultAnthropicMaxTokens = 4096
)

// Config is one model definition's API settings.
type Config struct {
	API         string        // OpenAIChat or AnthropicMessages
	Endpoint    string        // base URL as the provider's SDK takes it: "https://api.openai.com/v1", "http://127.0.0.1:11434/v1", "https://api.anthropic.com"
	ModelID     string        // the provider's model name
	APIKey      string        // secret, sent only in the auth header; "" sends none
	MaxTokens   int           // 0: omitted for openai-chat, DefaultAnthropicMaxTokens for anthropic-messages
	Temperature *float64      // nil: omitted
	Timeout     time.Duration // bound on the whole request, streaming included; 0: none
	IdleTimeout time.Duration // bound on silence (no headers, no stream bytes); 0: DefaultIdleTimeout
}

// Turn is one message of the conversation.
type Turn struct {
	Role       string // "user", "assistant" or "tool"
	Text       string
	ToolCalls  []ToolCall // assistant turns only
	ToolCallID string     // tool turns: the call this result answers
	ToolName   string     // tool turns, optional
	IsError    bool       // tool turns: the tool failed
}

// ToolCall is one tool call an assistant turn made; Arguments is JSON text.
type ToolCall struct{ ID, Name, Arguments string }

// Tool is one tool offered to the model (SPEC 17): its name as ctxfs
// spells it ("fs.read"; the wire format maps it to what the API allows,
// "fs_read"), what it does, and its arguments as a JSON Schema object.
type Tool struct {
	Name, Description string
	Parameters        json.RawMessage
}

// Request is what is sent: the system prompt ("" for none), the turns, and
// the tools offered (none: the model is offered no tool); and whose
// conversation it is, for what is kept of it between requests.
type Request struct {
	System string
	Turns  []Turn
	Tools  []Tool
	Owner  Owner
}

// Owner is whose conversation a request is. What a request's body keeps
// for the next (its settled turns, settled.go) serves only later requests
// of the same Owner, so that no user can learn, by timing sends of their
// own, whether another's conversation is in the server's memory; and one
// uid keeps at most a share of it. An Owner without a Conversation keeps
// nothing. The request goes over its Uid's connections (transportFor).
type Owner struct {
	Uid          uint32
	Conversation string // a name no other conversation has (the engine gives the session's key)
}

// Result is the reply once the stream has ended.
type Result struct {
	Text                      string // the whole assistant text
	InputTokens, OutputTokens int    // from the provider's usage
	StopReason                string // the provider's own words: "stop", "end_turn", "length", …
	// ToolCalls are the calls the reply made, in order, their names as
	// ctxfs spells them (Tool.Name) and their arguments as JSON text.
	ToolCalls []ToolCall
}

// Roles of a Turn.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Validate checks c and returns an EINVAL *abi.Error whose message starts
// with the field at fault as a definition names it (api, endpoint,
// model_id, max_tokens, temperature, timeout, api key). The caller adds
// the file name.
func (c Config) Validate() error {
	invalid := func(format string, args ...any) error {
		return abi.Errorf(syscall.EINVAL, "config", format, args...)
	}
	switch {
	case c.API != OpenAIChat && c.API != AnthropicMessages:
		return invalid("api: unknown API %q (want %s or %s)", c.API, OpenAIChat, AnthropicMessages)
	case strings.TrimSpace(c.ModelID) == "":
		return invalid("model_id: empty")
	case c.MaxTokens < 0:
		return invalid("max_tokens: %d is negative", c.MaxTokens)
	case c.Timeout < 0:
		return invalid("timeout: %v is negative", c.Timeout)
	case c.IdleTimeout < 0:
		return invalid("idle timeout: %v is negative", c.IdleTimeout)
	case !keyOK(c.APIKey):
		// Never quote the key: this message may be shown to anyone.
		return invalid("api key: has white space or characters other than printable ASCII")
	}
	if err := checkEndpoint(c.Endpoint); err != nil {
		return invalid("endpoint: %v", err)
	}
	if err := checkTemperature(c.API, c.Temperature); err != nil {
		return invalid("temperature: %v", err)
	}
	return nil
}

// checkEndpoint accepts an http(s) URL with a host. It refuses user info,
// a query and a fragment: a credential must travel only in the auth
// header, and the API path is appended to the endpoint's path. Its errors
// never quote the parts that could hold a credential.
func checkEndpoint(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("scheme %q is not http or https", u.Scheme)
	case u.Hostname() == "":
		return fmt.Errorf("no host")
	case u.User != nil:
		return fmt.Errorf("must not carry credentials; the key goes in api_key_env or api_key_file")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return fmt.Errorf("%s://%s%s… must not have a query or fragment", u.Scheme, u.Host, u.EscapedPath())
	}
	return nil
}

// checkTemperature takes 0..2 (OpenAI's range); Anthropic accepts only
// 0..1 and would refuse the request.
func checkTemperature(api string, t *float64) error {
	if t == nil {
		return nil
	}
	max := 2.0
	if api == AnthropicMessages {
		max = 1
	}
	if math.IsNaN(*t) || *t < 0 || *t > max {
		return fmt.Errorf("%v is out of 0..%v for %s", *t, max, api)
	}
	return nil
}

// keyOK says whether k can go in a header as it is: printable ASCII
// without spaces, as every provider's keys are.
func keyOK(k string) bool {
	for i := 0; i < len(k); i++ {
		if k[i] <= ' ' || k[i] > '~' {
			return false
		}
	}
	return true
}
