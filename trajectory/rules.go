package trajectory

import (
	"encoding/json"
	"fmt"
)

// These are the ATIF rules a JSON Schema cannot state. They work on decoded
// JSON (numbers as json.Number, as jsonschema.UnmarshalJSON gives them), so
// that they check what was written, not this package's own structures.

// CheckRules checks a decoded document: its step_ids are 1, 2, 3 … in
// order, and every observation result's source_call_id names a tool call
// of the same step (whose ids are unique within it).
func CheckRules(doc any) error {
	root, _ := doc.(map[string]any)
	steps, ok := root["steps"].([]any)
	if !ok {
		return fmt.Errorf("no steps array")
	}
	for i, s := range steps {
		if err := checkStep(s, i+1); err != nil {
			return err
		}
	}
	return nil
}

// stepRule is the per-step rule for the step that must have id want.
func stepRule(want int) func(any) error {
	return func(v any) error { return checkStep(v, want) }
}

func checkStep(v any, want int) error {
	step, _ := v.(map[string]any)
	if n, ok := step["step_id"].(json.Number); !ok || n.String() != fmt.Sprint(want) {
		return fmt.Errorf("steps[%d].step_id is %v, want %d (1, 2, 3 … in order)", want-1, step["step_id"], want)
	}
	ids := map[string]bool{}
	calls, _ := step["tool_calls"].([]any)
	for _, c := range calls {
		call, _ := c.(map[string]any)
		id, _ := call["tool_call_id"].(string)
		if ids[id] {
			return fmt.Errorf("step %d: tool_call_id %q twice", want, id)
		}
		ids[id] = true
	}
	obs, _ := step["observation"].(map[string]any)
	results, _ := obs["results"].([]any)
	for _, r := range results {
		res, _ := r.(map[string]any)
		src, ok := res["source_call_id"].(string)
		if ok && !ids[src] {
			return fmt.Errorf("step %d: source_call_id %q names no tool call of the step", want, src)
		}
	}
	return nil
}
