// Package window owns the arithmetic of a model run's context window
// (SPEC 18): how many tokens a text is taken to be (Tokens, a
// conservative estimate: no Go tokenizer of the providers runs offline),
// how large a model's window is when its definition says auto (Auto),
// where a conversation that does not fit is cut (Cut: never between a
// tool call and its results, at a user turn when it can), and how the
// summary file names the last message it covers (Cursor).
//
// It does no I/O, runs nothing and decides no summary's words: the agent
// package compacts (strategies), the engine keeps the summary file.
package window

import (
	"math/bits"
	"strings"
	"unicode/utf8"

	"github.com/ctxfs/ctxfs/agent/modelapi"
)

const (
	// DefaultWindow is a model's window when its id says nothing we know:
	// what most current chat models offer at least.
	DefaultWindow = 128000
	// DefaultReserve is the reply's reserve when the definition sets no
	// max_tokens: what ctxfs sends Anthropic then
	// (modelapi.DefaultAnthropicMaxTokens), and a reply OpenAI's models
	// give within it in the common case.
	DefaultReserve = modelapi.DefaultAnthropicMaxTokens
	// turnOverhead is what each message costs beyond its text: role and
	// separator tokens (OpenAI's chat format spends 3-4, Anthropic's
	// similar), a tool call's id and name, rounded up.
	turnOverhead = 8
	// MaxSummaryTokens bounds a summary whatever the window: a summary is
	// a digest, and a larger one leaves no room for the conversation.
	MaxSummaryTokens = 8192
)

// Tokens is the estimated token count of s, never less than what the
// providers' byte-level BPE tokenizers (OpenAI's cl100k/o200k, Claude's)
// make of prose, code and JSON: one token per 3 ASCII bytes (they
// average 4 or more bytes a token on English and code, 3.5 on dense JSON)
// and one per 2 bytes of anything else (a CJK character, 3 bytes, is one
// or two tokens there; accented Latin is cheaper). Its limits: text that
// is mostly short odd fragments (random hex or base64, long digit runs,
// emoji sequences) can take more tokens than this says; a byte-level BPE
// never takes more than one token per byte, so the worst case is 3 times
// the estimate. The reply's reserve absorbs small misses; a provider that
// still refuses says so (an error frame).
func Tokens(s string) int {
	other := 0 // bytes of 0x80 and over, counted eight at a time: a long prompt's every text is counted at each run
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		other += bits.OnesCount64(w & 0x8080808080808080)
	}
	for ; i < len(s); i++ {
		other += int(s[i] >> 7)
	}
	ascii := len(s) - other
	return (ascii+2)/3 + (other+1)/2
}

// TurnTokens is the estimate of one turn as sent: its text, its calls'
// names and arguments, a result's id, plus the framing.
func TurnTokens(t modelapi.Turn) int {
	n := turnOverhead + Tokens(t.Text) + Tokens(t.ToolCallID) + Tokens(t.ToolName)
	for _, c := range t.ToolCalls {
		n += turnOverhead + Tokens(c.ID) + Tokens(c.Name) + Tokens(c.Arguments)
	}
	return n
}

// RequestTokens is the estimate of a whole request's prompt: the system
// prompt, the tools offered (their JSON as sent), and the turns.
func RequestTokens(req modelapi.Request) int {
	n := turnOverhead + Tokens(req.System)
	for _, t := range req.Tools {
		n += turnOverhead + Tokens(t.Name) + Tokens(t.Description) + Tokens(string(t.Parameters))
	}
	for _, t := range req.Turns {
		n += TurnTokens(t)
	}
	return n
}

// knownWindows are the context lengths of model families, by the start
// of their provider's model id, most specific first (the providers'
// published figures).
var knownWindows = []struct {
	prefix string
	tokens int
}{
	{"gpt-4.1", 1047576},
	{"gpt-5", 400000},
	{"gpt-4o", 128000},
	{"gpt-4-turbo", 128000},
	{"gpt-4-32k", 32768},
	{"gpt-4", 8192},
	{"gpt-3.5-turbo", 16385},
	{"o1-mini", 128000},
	{"o1", 200000},
	{"o3", 200000},
	{"o4", 200000},
	{"claude-", 200000},
	{"llama3.1", 128000},
	{"llama3.2", 128000},
	{"llama3", 8192},
	{"mistral", 32768},
	{"qwen2.5", 32768},
}

// Auto is the window of a model by its provider's id: a known family's
// context length, else DefaultWindow. A gateway's "vendor/model" ids
// and Ollama's "model:tag" are read by their model part.
func Auto(modelID string) int {
	id := strings.ToLower(modelID)
	if i := strings.LastIndexByte(id, '/'); i >= 0 {
		id = id[i+1:]
	}
	for _, k := range knownWindows {
		if strings.HasPrefix(id, k.prefix) {
			return k.tokens
		}
	}
	return DefaultWindow
}

// Limits are one run's window figures, in tokens.
type Limits struct {
	Window    int // the model's context window
	Reserve   int // kept for the reply (max_tokens, or DefaultReserve)
	CompactAt int // a prompt larger than this is compacted (≤ Prompt())
}

// LimitsOf resolves a definition's window and compact (0 for auto) and
// the reply's max_tokens (0 for the provider default) for a model id. A
// window smaller than the reserve leaves the reserve a quarter of it; a
// compaction point beyond what a prompt may hold is that bound.
func LimitsOf(modelID string, win, compact, maxTokens int) Limits {
	l := Limits{Window: win, Reserve: maxTokens}
	if l.Window == 0 {
		l.Window = Auto(modelID)
	}
	if l.Reserve == 0 {
		l.Reserve = DefaultReserve
	}
	if l.Reserve >= l.Window {
		l.Reserve = l.Window / 4
	}
	l.CompactAt = compact
	if l.CompactAt == 0 || l.CompactAt > l.Prompt() {
		l.CompactAt = l.Prompt()
	}
	return l
}

// Prompt is the most a prompt may hold: the window less the reserve.
func (l Limits) Prompt() int { return l.Window - l.Reserve }

// SummaryTokens is the most a summary may take: an eighth of the
// compaction point, at most MaxSummaryTokens.
func (l Limits) SummaryTokens() int { return max(1, min(l.CompactAt/8, MaxSummaryTokens)) }

// SummaryBytes is the most bytes a summary may have: no text of it
// estimates to more than SummaryTokens.
func (l Limits) SummaryBytes() int { return 2 * l.SummaryTokens() }

// Newest is the end of s that Tokens takes to be at most n tokens, from
// a whole rune: what a bounded request keeps of a long text.
func Newest(s string, n int) string {
	ascii, other := 0, 0
	i := len(s)
	for i > 0 {
		if s[i-1] < 0x80 {
			ascii++
		} else {
			other++
		}
		if (ascii+2)/3+(other+1)/2 > n {
			break
		}
		i--
	}
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}
