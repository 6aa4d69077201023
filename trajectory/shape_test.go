package trajectory

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestShapeBlanksOnlyTypedPlaces pins what shapeKey relies on: each place
// of a step it blanks is one the schema checks by its JSON type alone.
// A change to the schema that asks more of one of them fails here, and
// shapeKey must then keep that place.
func TestShapeBlanksOnlyTypedPlaces(t *testing.T) {
	var sch struct {
		Defs map[string]map[string]any `json:"$defs"`
	}
	if err := json.Unmarshal(schemaJSON, &sch); err != nil {
		t.Fatal(err)
	}
	prop := func(def, name string) any {
		return sch.Defs[def]["properties"].(map[string]any)[name]
	}
	ref := func(def string) map[string]any { return map[string]any{"$ref": "#/$defs/" + def} }
	typed := func(types ...any) map[string]any {
		if len(types) == 1 {
			return map[string]any{"type": types[0]}
		}
		return map[string]any{"type": types}
	}
	orNull := func(def string) map[string]any {
		return map[string]any{"oneOf": []any{map[string]any{"type": "null"}, ref(def)}}
	}
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"step.step_id (numbered by the rules)", prop("step", "step_id"), map[string]any{"type": "integer", "minimum": 1.0}},
		{"step.message", prop("step", "message"), ref("content")},
		{"content: a string whatever it says", sch.Defs["content"]["oneOf"].([]any)[0], typed("string")},
		{"step.model_name", prop("step", "model_name"), ref("optString")},
		{"optString", sch.Defs["optString"], typed("string", "null")},
		{"step.timestamp (checked on its own)", prop("step", "timestamp"), orNull("timestamp")},
		{"step.extra", prop("step", "extra"), ref("extra")},
		{"extra", sch.Defs["extra"]["type"], []any{"object", "null"}},
		{"extra's keywords", len(sch.Defs["extra"]), 2}, // type and description
		{"toolCall.tool_call_id", prop("toolCall", "tool_call_id"), typed("string")},
		{"toolCall.function_name", prop("toolCall", "function_name"), typed("string")},
		{"toolCall.arguments", prop("toolCall", "arguments"), typed("object")},
		{"observationResult.source_call_id", prop("observationResult", "source_call_id"), ref("optString")},
		{"observationResult.content", prop("observationResult", "content"), orNull("content")},
		{"metrics.prompt_tokens", prop("metrics", "prompt_tokens"), ref("optInteger")},
		{"metrics.completion_tokens", prop("metrics", "completion_tokens"), ref("optInteger")},
		{"optInteger", sch.Defs["optInteger"], typed("integer", "null")},
	} {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("%s: the schema says %v, shapeKey assumes %v", c.what, c.got, c.want)
		}
	}
	// And shapeKey blanks nothing else: every field of a step is named.
	fields := map[string]bool{}
	for _, f := range reflect.VisibleFields(reflect.TypeOf(Step{})) {
		fields[f.Name] = true
	}
	for _, f := range []string{"StepID", "Timestamp", "Source", "ModelName", "Message", "ToolCalls", "Observation", "Metrics", "Extra", "run", "calls"} {
		delete(fields, f)
	}
	if len(fields) > 0 {
		t.Errorf("Step has fields shapeKey does not know: %v", fields)
	}
}

// TestShapesNeverVouchForInvalid: steps made at random from valid and
// invalid parts (ids and names of other types, arguments that are not
// objects, bad timestamps, results of no call, ids twice, wrong numbers),
// after the shapes of many valid ones were learnt: a step the shapes
// vouch for is one the full validation accepts, and the full validation
// is what still judges the others.
func TestShapesNeverVouchForInvalid(t *testing.T) {
	sch, err := compiled()
	if err != nil {
		t.Fatal(err)
	}
	v := newShapes(sch)
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	step := func(want int) *Step {
		s := newStep(pick(SourceAgent, SourceAgent, SourceUser, SourceSystem), pick("", "run-1"), pick("", "2026-01-02T03:04:05.123Z", "2026-01-02T03:04:05Z", "2026-01-02T03:04:05.1+01:00", "2026-13-02T03:04:05Z", "2026-01-02t03:04:05z", "2026-01-02T03:04:05.000+0100"))
		s.StepID = want
		if rng.IntN(20) == 0 {
			s.StepID = want + 1
		}
		s.Message = pick("", "hi", "<&>")
		if s.Source == SourceAgent || rng.IntN(10) == 0 {
			s.ModelName = pick("", "m/x")
			for range rng.IntN(3) {
				id := pick(`"c1"`, `"c2"`, `"c\u00e9"`, `7`, `null`, `{"a":1}`)
				s.addCall(id+fmt.Sprint(rng.IntN(2)), ToolCall{ToolCallID: json.RawMessage(id), FunctionName: json.RawMessage(pick(`"sh"`, `"sh"`, `3`, `true`)), Arguments: json.RawMessage(pick(`{}`, `{"command":"ls"}`, ` {"a":[1,2]}`, `"ls"`, `[1]`, `null`))})
			}
			if rng.IntN(2) == 0 {
				s.addUsage(&usage{model: "m", prompt: new(int64), completion: nil})
			}
		}
		for range rng.IntN(3) {
			content := pick("out", "")
			r := Result{SourceCallID: pick("c1", "c2", "cé", "")}
			if rng.IntN(3) > 0 {
				r.Content = &content
			}
			if rng.IntN(3) == 0 {
				r.Extra = &ResultExtra{IsError: true}
			}
			s.addResult(r)
		}
		return s
	}
	vouched, valid := 0, 0
	for i := range 20000 {
		want := 1 + i%5
		s := step(want)
		b, err := marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		full := validate(sch.step, b, "step", stepRule(want))
		ok, key := v.vouch(s, want)
		if ok && full != nil {
			t.Fatalf("vouched for an invalid step (%v):\n%s", full, b)
		}
		if ok {
			vouched++
		}
		if full == nil {
			valid++
			v.learn(key)
		}
	}
	t.Logf("%d valid steps, %d vouched for by their shape, %d shapes", valid, vouched, len(v.seen))
	if vouched == 0 || valid == 20000 {
		t.Fatalf("the test makes no case: %d valid, %d vouched", valid, vouched)
	}
}
