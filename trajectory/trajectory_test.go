package trajectory

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.json")

var testInfo = Info{SessionID: "s", Agent: Agent{Name: "coder", Version: "unknown"}}

// exportCase exports testdata/NAME.messages.jsonl and NAME.events.jsonl.
func exportCase(t *testing.T, name string) ([]byte, error) {
	t.Helper()
	msgs, err := os.Open(filepath.Join("testdata", name+".messages.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer msgs.Close()
	events, err := os.Open(filepath.Join("testdata", name+".events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer events.Close()
	var out bytes.Buffer
	err = Export(&out, msgs, events, testInfo)
	return out.Bytes(), err
}

// independentSchema compiles atif-v1.7.schema.json from the file, with a
// compiler of its own: the check does not go through the package's
// embedded copy or its per-step validation.
func independentSchema(t testing.TB) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	sch, err := c.Compile("atif-v1.7.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

// checkDocument validates a whole document against the schema file and
// the Go rules.
func checkDocument(t testing.TB, sch *jsonschema.Schema, doc []byte) {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		t.Fatalf("not one JSON value: %v\n%s", err, doc)
	}
	if err := sch.Validate(v); err != nil {
		t.Fatalf("schema: %v\n%s", err, doc)
	}
	if err := CheckRules(v); err != nil {
		t.Fatalf("rules: %v\n%s", err, doc)
	}
}

// TestGolden: each case exports to its golden document, which validates.
// The cases: tools (calls before the answer, a message carrying its own
// call, arguments as a JSON string, an error result, an unanswered call);
// drops (a result for an unknown call, a result of another run reusing a
// call id); unicode; concurrent runs; usage in both orders and a run still
// active at the end; reuse (a run that uses one call id twice: a call made
// after an assistant message joins that message's step); threads (a CLI
// that reports its thread's total: each run's step counts its own part).
func TestGolden(t *testing.T) {
	sch := independentSchema(t)
	for _, name := range []string{"tools", "drops", "unicode", "concurrent", "usage", "reuse", "threads"} {
		t.Run(name, func(t *testing.T) {
			got, err := exportCase(t, name)
			if err != nil {
				t.Fatal(err)
			}
			checkDocument(t, sch, got)
			golden := filepath.Join("testdata", name+".golden.json")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("got:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// TestNoMessages: ATIF needs a step, so a session with nothing to make one
// of (no messages; only a tool result whose call was never made) is
// refused with ENODATA rather than printed invalid.
func TestNoMessages(t *testing.T) {
	for _, name := range []string{"empty", "toolsonly"} {
		t.Run(name, func(t *testing.T) {
			_, err := exportCase(t, name)
			if !errors.Is(err, syscall.ENODATA) || err.Error() != "ENODATA: session s has no messages" {
				t.Fatalf("err %v, want ENODATA: session s has no messages", err)
			}
		})
	}
	if err := Export(new(bytes.Buffer), nil, nil, testInfo); !errors.Is(err, syscall.ENODATA) {
		t.Fatalf("no logs at all: err %v, want ENODATA", err)
	}
}

// TestRefusesInvalid: arguments that are not an object are kept as they
// are, so the step does not validate and the export fails with EINVAL,
// naming the step and the place.
func TestRefusesInvalid(t *testing.T) {
	_, err := exportCase(t, "badargs")
	var ie *InvalidError
	if !errors.As(err, &ie) || !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("err %v, want an *InvalidError (EINVAL)", err)
	}
	if ie.Where != "step 2" || !strings.Contains(ie.Msg, "/tool_calls/0/arguments") {
		t.Errorf("err %q: want step 2 and /tool_calls/0/arguments", err)
	}
}

// TestDamagedLog: a line that is not a JSON object is reported, with its
// log and line number, as EIO.
func TestDamagedLog(t *testing.T) {
	msgs := "{\"role\":\"user\",\"content\":\"a\"}\n\nnot json\n"
	err := Export(new(bytes.Buffer), strings.NewReader(msgs), nil, testInfo)
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "messages.jsonl line 3: not a JSON object") {
		t.Fatalf("err %v, want EIO at messages.jsonl line 3", err)
	}
	long := "{\"role\":\"user\",\"content\":\"" + strings.Repeat("x", 1<<20) + "\"}\n"
	err = Export(new(bytes.Buffer), strings.NewReader(long), nil, testInfo)
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "line 1: longer than") {
		t.Fatalf("err %v, want EIO for a line over 1 MiB", err)
	}
}

// TestLongestLine: a line of exactly abi.MaxLineBytes is read whole.
func TestLongestLine(t *testing.T) {
	pre, post := `{"role":"user","content":"`, `"}`
	line := pre + strings.Repeat("y", 1<<20-len(pre)-len(post)) + post
	var out bytes.Buffer
	if err := Export(&out, strings.NewReader(line+"\n"), nil, testInfo); err != nil {
		t.Fatal(err)
	}
	checkDocument(t, independentSchema(t), out.Bytes())
}

// TestSchemaRejects: the schema file itself refuses what ATIF forbids.
func TestSchemaRejects(t *testing.T) {
	sch := independentSchema(t)
	const agent = `"agent":{"name":"a","version":"1"}`
	doc := func(steps string) string {
		return `{"schema_version":"ATIF-v1.7",` + agent + `,"steps":[` + steps + `]}`
	}
	valid := doc(`{"step_id":1,"source":"user","message":"hi","timestamp":"2026-01-02T03:04:05.000Z"},` +
		`{"step_id":2,"source":"agent","message":"","model_name":"m",` +
		`"tool_calls":[{"tool_call_id":"c","function_name":"f","arguments":{}}],` +
		`"observation":{"results":[{"source_call_id":"c","content":"x","extra":{"k":1}}]},` +
		`"metrics":{"prompt_tokens":1,"completion_tokens":2},"extra":{"run":"r"}}`)
	bad := map[string]string{
		"unknown root key":       `{"schema_version":"ATIF-v1.7",` + agent + `,"steps":[{"step_id":1,"source":"user","message":""}],"colour":1}`,
		"unknown step key":       doc(`{"step_id":1,"source":"user","message":"","colour":1}`),
		"unknown tool call key":  doc(`{"step_id":1,"source":"agent","message":"","tool_calls":[{"tool_call_id":"c","function_name":"f","arguments":{},"colour":1}]}`),
		"unknown agent key":      `{"schema_version":"ATIF-v1.7","agent":{"name":"a","version":"1","colour":1},"steps":[{"step_id":1,"source":"user","message":""}]}`,
		"bad source":             doc(`{"step_id":1,"source":"assistant","message":""}`),
		"tool_calls on user":     doc(`{"step_id":1,"source":"user","message":"","tool_calls":[{"tool_call_id":"c","function_name":"f","arguments":{}}]}`),
		"model_name on system":   doc(`{"step_id":1,"source":"system","message":"","model_name":"m"}`),
		"metrics on user":        doc(`{"step_id":1,"source":"user","message":"","metrics":{}}`),
		"arguments a string":     doc(`{"step_id":1,"source":"agent","message":"","tool_calls":[{"tool_call_id":"c","function_name":"f","arguments":"ls"}]}`),
		"arguments missing":      doc(`{"step_id":1,"source":"agent","message":"","tool_calls":[{"tool_call_id":"c","function_name":"f"}]}`),
		"no steps":               doc(``),
		"no agent version":       `{"schema_version":"ATIF-v1.7","agent":{"name":"a"},"steps":[{"step_id":1,"source":"user","message":""}]}`,
		"other version":          `{"schema_version":"ATIF-v1.6",` + agent + `,"steps":[{"step_id":1,"source":"user","message":""}]}`,
		"no message":             doc(`{"step_id":1,"source":"user"}`),
		"timestamp not RFC 3339": doc(`{"step_id":1,"source":"user","message":"","timestamp":"2026-01-02 03:04"}`),
		"step_id 0":              doc(`{"step_id":0,"source":"user","message":""}`),
		"metrics with no LLM":    doc(`{"step_id":1,"source":"agent","message":"","llm_call_count":0,"metrics":{}}`),
		"unresolvable ref":       doc(`{"step_id":1,"source":"agent","message":"","observation":{"results":[{"subagent_trajectory_ref":[{"session_id":"s"}]}]}}`),
	}
	check := func(s string) error {
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(s))
		if err != nil {
			t.Fatal(err)
		}
		return sch.Validate(v)
	}
	if err := check(valid); err != nil {
		t.Fatalf("the valid document is refused: %v", err)
	}
	for name, s := range bad {
		if check(s) == nil {
			t.Errorf("%s: accepted: %s", name, s)
		}
	}
}

// TestRules: what the schema cannot say, CheckRules does.
func TestRules(t *testing.T) {
	for name, steps := range map[string]string{
		"ids start at 2":     `{"step_id":2,"source":"user","message":""}`,
		"ids out of order":   `{"step_id":1,"source":"user","message":""},{"step_id":3,"source":"user","message":""}`,
		"result of no call":  `{"step_id":1,"source":"agent","message":"","observation":{"results":[{"source_call_id":"c"}]}}`,
		"call of other step": `{"step_id":1,"source":"agent","message":"","tool_calls":[{"tool_call_id":"c","function_name":"f","arguments":{}}]},{"step_id":2,"source":"agent","message":"","observation":{"results":[{"source_call_id":"c"}]}}`,
		"call id twice":      `{"step_id":1,"source":"agent","message":"","tool_calls":[{"tool_call_id":"c","function_name":"f","arguments":{}},{"tool_call_id":"c","function_name":"f","arguments":{}}]}`,
	} {
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(`{"steps":[` + steps + `]}`))
		if err != nil {
			t.Fatal(err)
		}
		if CheckRules(v) == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestHandWritten: lines appended by hand through the mount may lack run
// and ts, or hold a ts that is not RFC 3339, or a role ATIF has no step
// for: the steps go without what is missing, nothing is made up.
func TestHandWritten(t *testing.T) {
	msgs := `{"role":"system","content":"be brief"}
{"role":"user","content":"hi","ts":"yesterday"}
{"role":"note","content":"not a step"}
{"role":"assistant","content":"hello","ts":"2026-01-02T03:04:05,000Z"}
{"role":"assistant","content":{"odd":true}}
`
	var out bytes.Buffer
	if err := Export(&out, strings.NewReader(msgs), nil, testInfo); err != nil {
		t.Fatal(err)
	}
	checkDocument(t, independentSchema(t), out.Bytes())
	want := `{"schema_version":"ATIF-v1.7","session_id":"s","agent":{"name":"coder","version":"unknown"},"steps":[
{"step_id":1,"source":"system","message":"be brief"},
{"step_id":2,"source":"user","message":"hi"},
{"step_id":3,"source":"agent","message":"hello"},
{"step_id":4,"source":"agent","message":"{\"odd\":true}"}
],"final_metrics":{"total_steps":4}}
`
	if out.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
	}
}
