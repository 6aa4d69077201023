package trajectory

import (
	"strconv"

	"github.com/ctxfs/ctxfs/internal/jsonscan"
)

// Writing each step through encoding/json's reflection was a fifth of an
// export's time (docs/benchmarks.md#trajectory). appendStep writes a Step
// byte for byte as marshal does, field by field in the order and with the
// omissions of its tags; TestAppendStepIsMarshal and FuzzAppendStep hold
// the two to the same bytes.

// appendStep appends marshal(s) to b; false when a raw value of s is not
// JSON, on which marshal fails (and says why).
func appendStep(b []byte, s *Step) ([]byte, bool) {
	b = append(b, `{"step_id":`...)
	b = strconv.AppendInt(b, int64(s.StepID), 10)
	if s.Timestamp != "" {
		b = appendString(append(b, `,"timestamp":`...), s.Timestamp)
	}
	b = appendString(append(b, `,"source":`...), s.Source)
	if s.ModelName != "" {
		b = appendString(append(b, `,"model_name":`...), s.ModelName)
	}
	b = appendString(append(b, `,"message":`...), s.Message)
	ok := true
	if len(s.ToolCalls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i, c := range s.ToolCalls {
			if i > 0 {
				b = append(b, ',')
			}
			if b, ok = appendToolCall(b, &c); !ok {
				return b, false
			}
		}
		b = append(b, ']')
	}
	if o := s.Observation; o != nil {
		b = append(b, `,"observation":{"results":`...)
		if o.Results == nil {
			b = append(b, "null"...)
		} else {
			b = append(b, '[')
			for i, r := range o.Results {
				if i > 0 {
					b = append(b, ',')
				}
				b = appendResult(b, &r)
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	if m := s.Metrics; m != nil {
		b = append(b, `,"metrics":{`...)
		if m.PromptTokens != nil {
			b = strconv.AppendInt(append(b, `"prompt_tokens":`...), *m.PromptTokens, 10)
		}
		if m.CompletionTokens != nil {
			if m.PromptTokens != nil {
				b = append(b, ',')
			}
			b = strconv.AppendInt(append(b, `"completion_tokens":`...), *m.CompletionTokens, 10)
		}
		b = append(b, '}')
	}
	if s.Extra != nil {
		b = append(appendString(append(b, `,"extra":{"run":`...), s.Extra.Run), '}')
	}
	return append(b, '}'), true
}

// appendToolCall: its id and name are left out when empty (omitempty), its
// arguments written as null when missing; raw values without white space.
func appendToolCall(b []byte, c *ToolCall) ([]byte, bool) {
	b = append(b, '{')
	ok := true
	if len(c.ToolCallID) > 0 {
		if b, ok = jsonscan.AppendCompact(append(b, `"tool_call_id":`...), c.ToolCallID); !ok {
			return b, false
		}
		b = append(b, ',')
	}
	if len(c.FunctionName) > 0 {
		if b, ok = jsonscan.AppendCompact(append(b, `"function_name":`...), c.FunctionName); !ok {
			return b, false
		}
		b = append(b, ',')
	}
	b = append(b, `"arguments":`...)
	if c.Arguments == nil {
		b = append(b, "null"...)
	} else if b, ok = jsonscan.AppendCompact(b, c.Arguments); !ok {
		return b, false
	}
	return append(b, '}'), true
}

func appendResult(b []byte, r *Result) []byte {
	b = appendString(append(b, `{"source_call_id":`...), r.SourceCallID)
	if r.Content != nil {
		b = appendString(append(b, `,"content":`...), *r.Content)
	}
	if r.Extra != nil {
		b = strconv.AppendBool(append(b, `,"extra":{"is_error":`...), r.Extra.IsError)
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendString appends s quoted as marshal quotes it.
func appendString(b []byte, s string) []byte { return jsonscan.AppendString(b, s) }
