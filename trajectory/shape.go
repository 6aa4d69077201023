package trajectory

import (
	"bytes"
	"encoding/json"

	"github.com/ctxfs/ctxfs/proto"
)

// Validating every step with the schema was two fifths of an export's
// time (docs/benchmarks.md#trajectory). A step's validity depends only on
// its shape, its timestamp and the rules a schema cannot state: the
// schema asks nothing of its texts, ids, names, counts and argument
// objects but their JSON type (TestShapeBlanksOnlyTypedPlaces pins the
// parts of the schema that say so). So a step whose shape (shapeKey) has
// validated before, whose timestamp validates against the schema's own
// timestamp definition and whose rules hold (rulesHold) is valid
// without the schema walking it again; any other step is validated in
// full, as before, and a failure is reported as the full validation
// words it. The shapes vouch only for steps that validated; nothing is
// ever accepted on the strength of a shape alone.
type shapes struct {
	sch  *schemas
	seen map[string]bool
	key  []byte // the last step's shape
}

// maxShapes bounds the shapes remembered: a session of more distinct
// shapes is validated in full past it, as before.
const maxShapes = 4096

// shapeTimestamp stands for every timestamp in a shape: one the
// timestamp definition accepts (each real one is checked against it).
const shapeTimestamp = "2000-01-01T00:00:00Z"

func newShapes(sch *schemas) *shapes { return &shapes{sch: sch, seen: map[string]bool{}} }

// vouch says whether s (numbered want) is valid by a shape seen before;
// key is its shape, for learn, until the next vouch.
func (v *shapes) vouch(s *Step, want int) (ok bool, key []byte) {
	v.key = shapeKey(v.key[:0], s)
	if !v.seen[string(v.key)] || !rulesHold(s, want) {
		return false, v.key
	}
	return s.Timestamp == "" || plainTimestamp(s.Timestamp) || v.sch.timestamp.Validate(s.Timestamp) == nil, v.key
}

// learn remembers the shape of a step that validated in full.
func (v *shapes) learn(key []byte) {
	if len(v.seen) < maxShapes && key != nil {
		v.seen[string(key)] = true
	}
}

// shapeKey is s as written with everything the step schema checks only
// by its type replaced by one value of that type: texts, ids and names
// (when they are strings) by "", numbers by 0, argument objects by {},
// the timestamp by shapeTimestamp. What the schema reads is kept as it
// is: the source, which fields are there, the number of calls and
// results, is_error, and every raw value of another type.
func shapeKey(b []byte, s *Step) []byte {
	k := Step{StepID: 1, Source: s.Source}
	if s.Timestamp != "" {
		k.Timestamp = shapeTimestamp
	}
	if s.ModelName != "" {
		k.ModelName = "m" // non-empty: omitempty keeps it
	}
	for _, c := range s.ToolCalls {
		k.ToolCalls = append(k.ToolCalls, ToolCall{ToolCallID: blankString(c.ToolCallID), FunctionName: blankString(c.FunctionName), Arguments: blankObject(c.Arguments)})
	}
	if s.Observation != nil {
		k.Observation = &Observation{Results: make([]Result, len(s.Observation.Results))}
		for i, r := range s.Observation.Results {
			k.Observation.Results[i] = Result{Extra: r.Extra}
			if r.Content != nil {
				k.Observation.Results[i].Content = new(string)
			}
		}
	}
	if s.Metrics != nil {
		k.Metrics = &Metrics{PromptTokens: blankInt(s.Metrics.PromptTokens), CompletionTokens: blankInt(s.Metrics.CompletionTokens)}
	}
	if s.Extra != nil {
		k.Extra = &StepExtra{}
	}
	b, ok := appendStep(b, &k)
	if !ok {
		return nil // never seen: the step is validated in full
	}
	return b
}

// blankString is "" for a JSON string, else raw as it is.
func blankString(raw json.RawMessage) json.RawMessage {
	if len(raw) > 0 && raw[0] == '"' {
		return json.RawMessage(`""`)
	}
	return raw
}

// blankObject is {} for a JSON object, else raw as it is.
func blankObject(raw json.RawMessage) json.RawMessage {
	if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '{' {
		return json.RawMessage(`{}`)
	}
	return raw
}

func blankInt(n *int64) *int64 {
	if n == nil {
		return nil
	}
	return new(int64)
}

// rulesHold is checkStep (the rules a schema cannot state) read from the
// step itself: its number is want, its tool_call_ids (as the document's
// reader decodes them; "" when not a string) are unique, and each
// result's source_call_id names one of them.
func rulesHold(s *Step, want int) bool {
	if s.StepID != want {
		return false
	}
	ids := make(map[string]bool, len(s.ToolCalls))
	for _, c := range s.ToolCalls {
		id := proto.RawString(c.ToolCallID)
		if ids[id] {
			return false
		}
		ids[id] = true
	}
	if s.Observation != nil {
		for _, r := range s.Observation.Results {
			if !ids[r.SourceCallID] {
				return false
			}
		}
	}
	return true
}
