package trajectory

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
)

// Strings and raw values that exercise every branch of the quoting and
// of the raw values' compaction, and raw values marshal refuses.
var (
	oddStrings = []string{"", "plain", "q\"b\\s/", "\b\f\n\r\t\x00\x01\x1f\x7f", "<a href=\"x\">&amp;</a>", "é中😀", "\u2028\u2029", "\xff\xfe bad \xc3", "\xe2\x80", "end\xe2\x80\xa8"}
	oddRaws    = []json.RawMessage{nil, {}, json.RawMessage(`"c1"`), json.RawMessage(` "c 1" `), json.RawMessage("{\"a b\": [1, 2],\n\t\"c\":{}}"), json.RawMessage(`7`),
		json.RawMessage(`null`), json.RawMessage(`""`), json.RawMessage(`"<&>\u2028"`), json.RawMessage("\"\xff\""), json.RawMessage(`{`), json.RawMessage(`{} x`), json.RawMessage(`"a\"b c"`)}
	oddInts = []int64{0, 1, -1, 7, math.MaxInt64, math.MinInt64}
)

// randomStep is a step whose every field is picked from the odd values,
// or left out, by r and pick (extra values a fuzzer supplies).
func randomStep(r *rand.Rand, strs []string, raws []json.RawMessage) *Step {
	str := func() string { return strs[r.IntN(len(strs))] }
	raw := func() json.RawMessage { return raws[r.IntN(len(raws))] }
	maybe := func() bool { return r.IntN(2) == 0 }
	integer := func() *int64 {
		if maybe() {
			return nil
		}
		n := oddInts[r.IntN(len(oddInts))]
		return &n
	}
	s := &Step{StepID: r.IntN(1000) - 1, Source: str(), Message: str()}
	if maybe() {
		s.Timestamp = str()
	}
	if maybe() {
		s.ModelName = str()
	}
	for range r.IntN(3) {
		s.ToolCalls = append(s.ToolCalls, ToolCall{ToolCallID: raw(), FunctionName: raw(), Arguments: raw()})
	}
	if maybe() {
		s.Observation = &Observation{}
		if maybe() {
			s.Observation.Results = []Result{}
		}
		for range r.IntN(3) {
			res := Result{SourceCallID: str()}
			if maybe() {
				c := str()
				res.Content = &c
			}
			if maybe() {
				res.Extra = &ResultExtra{IsError: maybe()}
			}
			s.Observation.Results = append(s.Observation.Results, res)
		}
	}
	if maybe() {
		s.Metrics = &Metrics{PromptTokens: integer(), CompletionTokens: integer()}
	}
	if maybe() {
		s.Extra = &StepExtra{Run: str()}
	}
	return s
}

// checkAppendStep: appendStep writes s as marshal does, and fails where
// marshal does.
func checkAppendStep(t *testing.T, s *Step) {
	t.Helper()
	want, err := marshal(s)
	got, ok := appendStep([]byte("x"), s)
	if ok != (err == nil) {
		t.Fatalf("%#v: appendStep ok %v, marshal error %v", s, ok, err)
	}
	if ok && string(got) != "x"+string(want) {
		t.Fatalf("%#v:\nappendStep %s\n   marshal %s", s, got[1:], want)
	}
}

func TestAppendStepIsMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		checkAppendStep(t, randomStep(r, oddStrings, oddRaws))
	}
}

func FuzzAppendStep(f *testing.F) {
	f.Add(uint64(1), "x", []byte(`{"a": 1}`))
	f.Add(uint64(2), "\xe2\x80\xa9\x00", []byte(` "s" `))
	f.Fuzz(func(t *testing.T, seed uint64, s string, raw []byte) {
		r := rand.New(rand.NewPCG(seed, 0))
		checkAppendStep(t, randomStep(r, append(oddStrings, s), append(oddRaws, raw)))
	})
}
