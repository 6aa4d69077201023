package trajectory

import (
	"encoding/json"

	"github.com/ctxfs/ctxfs/proto"
)

// SchemaVersion is the ATIF version this package writes.
const SchemaVersion = "ATIF-v1.7"

// Step sources.
const (
	SourceSystem = "system"
	SourceUser   = "user"
	SourceAgent  = "agent"
)

// Step is one ATIF step, in the field order it is written.
type Step struct {
	StepID      int          `json:"step_id"`
	Timestamp   string       `json:"timestamp,omitempty"`
	Source      string       `json:"source"`
	ModelName   string       `json:"model_name,omitempty"`
	Message     string       `json:"message"`
	ToolCalls   []ToolCall   `json:"tool_calls,omitempty"`
	Observation *Observation `json:"observation,omitempty"`
	Metrics     *Metrics     `json:"metrics,omitempty"`
	Extra       *StepExtra   `json:"extra,omitempty"`

	run   string          // the run the step belongs to
	calls map[string]bool // ids of ToolCalls, for joining results
}

// StepExtra is ctxfs's own data on a step.
type StepExtra struct {
	Run string `json:"run"`
}

// ToolCall keeps the id and name as the log had them (raw JSON), so that a
// malformed one fails validation instead of being quietly mended.
type ToolCall struct {
	ToolCallID   json.RawMessage `json:"tool_call_id,omitempty"`
	FunctionName json.RawMessage `json:"function_name,omitempty"`
	Arguments    json.RawMessage `json:"arguments"`
}

// Observation holds the results of a step's tool calls.
type Observation struct {
	Results []Result `json:"results"`
}

// Result is one tool result.
type Result struct {
	SourceCallID string       `json:"source_call_id"`
	Content      *string      `json:"content,omitempty"`
	Extra        *ResultExtra `json:"extra,omitempty"`
}

// ResultExtra carries is_error, which ATIF has no field for.
type ResultExtra struct {
	IsError bool `json:"is_error"`
}

// Metrics are a step's token counts.
type Metrics struct {
	PromptTokens     *int64 `json:"prompt_tokens,omitempty"`
	CompletionTokens *int64 `json:"completion_tokens,omitempty"`
}

// Agent is the document's agent object.
type Agent struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// FinalMetrics sums the steps' metrics.
type FinalMetrics struct {
	TotalPromptTokens     *int64 `json:"total_prompt_tokens,omitempty"`
	TotalCompletionTokens *int64 `json:"total_completion_tokens,omitempty"`
	TotalSteps            int    `json:"total_steps"`
}

func newStep(source, run, ts string) *Step {
	s := &Step{Source: source, Timestamp: ts, run: run}
	if run != "" {
		s.Extra = &StepExtra{Run: run}
	}
	return s
}

// isAgentOf reports whether s is an agent step of run.
func (s *Step) isAgentOf(run string) bool {
	return s != nil && s.Source == SourceAgent && s.run == run
}

// addCall appends c unless the step already holds a call with its id.
func (s *Step) addCall(id string, c ToolCall) {
	if s.calls[id] {
		return
	}
	if s.calls == nil {
		s.calls = map[string]bool{}
	}
	s.calls[id] = true
	s.ToolCalls = append(s.ToolCalls, c)
}

func (s *Step) addResult(r Result) {
	if s.Observation == nil {
		s.Observation = &Observation{}
	}
	s.Observation.Results = append(s.Observation.Results, r)
}

// addUsage adds a usage frame's counts to the step's metrics.
func (s *Step) addUsage(u *usage) {
	if s.Metrics == nil {
		s.Metrics = &Metrics{}
	}
	s.Metrics.PromptTokens = addPtr(s.Metrics.PromptTokens, u.prompt)
	s.Metrics.CompletionTokens = addPtr(s.Metrics.CompletionTokens, u.completion)
	if s.ModelName == "" {
		s.ModelName = u.model
	}
}

// addPtr adds b to a, either of which may be missing (nil).
func addPtr(a, b *int64) *int64 {
	switch {
	case b == nil:
		return a
	case a == nil:
		v := *b
		return &v
	}
	v := proto.AddTokens(*a, *b) // saturating: a total never wraps
	return &v
}
