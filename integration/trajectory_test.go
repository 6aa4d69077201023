package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/trajectory"
)

// trajectoryAgent is a jsonl agent that calls a tool, gets its result, gets
// a result for a call it never made, answers and reports its usage. Every
// run uses the call id c1: each result must join its own run's call.
const trajectoryAgent = `#!/bin/sh
read -r input
echo '{"type":"tool_call","id":"c1","name":"sh","arguments":{"command":"ls"}}'
echo '{"type":"tool_result","tool_call_id":"c1","name":"sh","content":"out ✓"}'
echo '{"type":"tool_result","tool_call_id":"ghost","name":"sh","content":"dropped"}'
echo '{"type":"message","role":"assistant","content":[{"type":"text","text":"done 完了"}]}'
echo '{"type":"usage","model":"test/tooler","input_tokens":5,"output_tokens":1}'
`

// ctxTrajectory runs the real ctx as root with CTX_ROOT set and returns its
// stdout, stderr and exit status apart.
func ctxTrajectory(t *testing.T, s *server, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(ctxBin, args...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/", "CTX_ROOT=" + s.root}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	testkit.Must(t, cmd.Start())
	timer := time.AfterFunc(cmdLimit, func() { cmd.Process.Kill() })
	err := cmd.Wait()
	timer.Stop()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		testkit.Must(t, err)
	}
	return o.String(), e.String(), code
}

// atifStep is what the test reads of a step.
type atifStep struct {
	StepID    int    `json:"step_id"`
	Source    string `json:"source"`
	Message   string `json:"message"`
	ModelName string `json:"model_name"`
	ToolCalls []struct {
		ID        string         `json:"tool_call_id"`
		Name      string         `json:"function_name"`
		Arguments map[string]any `json:"arguments"`
	} `json:"tool_calls"`
	Observation *struct {
		Results []struct {
			SourceCallID string `json:"source_call_id"`
			Content      string `json:"content"`
		} `json:"results"`
	} `json:"observation"`
	Metrics *struct {
		PromptTokens int `json:"prompt_tokens"`
	} `json:"metrics"`
	Extra struct {
		Run string `json:"run"`
	} `json:"extra"`
}

// TestTrajectory: after real sends through a real server, `ctx agent
// trajectory` prints one document that validates against the schema file
// (checked here by a validator of its own) and the ATIF rules, and maps
// the session as SPEC 13 says; an empty session is refused with ENODATA.
func TestTrajectory(t *testing.T) {
	requireFUSE(t)
	s := newServerWith(t, func(s *server) {
		s.define("tooler", map[string]string{"program": trajectoryAgent})
	})
	var runs []string
	for i, input := range []string{"list files", "again: ünï 中文 😀 <&>"} {
		frames := s.mustRequest("tooler", `{"op":"send","id":"tr`+string(rune('0'+i))+`","session":"traj","input":`+quoteJSON(input)+`}`)
		last := frames[len(frames)-1]
		if last["type"] != "done" || last["status"] != "ok" {
			t.Fatalf("send %d: %v\nlog:\n%s", i, frames, s.logText())
		}
		runs = append(runs, last["run"].(string))
	}

	out, errs, code := ctxTrajectory(t, s, "agent", "trajectory", "tooler", "--session", "traj")
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	validateATIF(t, out)
	var doc struct {
		SchemaVersion string `json:"schema_version"`
		SessionID     string `json:"session_id"`
		Agent         struct{ Name, Version string }
		Steps         []atifStep `json:"steps"`
	}
	testkit.Must(t, json.Unmarshal([]byte(out), &doc))
	if doc.SchemaVersion != "ATIF-v1.7" || doc.SessionID != "traj" || doc.Agent.Name != "tooler" || doc.Agent.Version == "" {
		t.Errorf("envelope %+v", doc)
	}
	inputs := []string{"list files", "again: ünï 中文 😀 <&>"}
	if len(doc.Steps) != 6 {
		t.Fatalf("%d steps, want 6 (user, tool step, answer per run):\n%s", len(doc.Steps), out)
	}
	for i, run := range runs {
		user, tool, answer := doc.Steps[3*i], doc.Steps[3*i+1], doc.Steps[3*i+2]
		checkRunSteps(t, run, inputs[i], user, tool, answer)
	}
}

// checkRunSteps checks the three steps one run of trajectoryAgent makes.
func checkRunSteps(t *testing.T, run, input string, user, tool, answer atifStep) {
	t.Helper()
	if user.Source != "user" || user.Message != input || user.Extra.Run != run {
		t.Errorf("user step %+v", user)
	}
	if tool.Source != "agent" || tool.Message != "" || tool.Extra.Run != run || len(tool.ToolCalls) != 1 ||
		tool.ToolCalls[0].ID != "c1" || tool.ToolCalls[0].Name != "sh" || tool.ToolCalls[0].Arguments["command"] != "ls" {
		t.Errorf("tool step %+v", tool)
	}
	if tool.Observation == nil || len(tool.Observation.Results) != 1 || tool.Observation.Results[0].SourceCallID != "c1" ||
		tool.Observation.Results[0].Content != "out ✓" {
		t.Errorf("tool step's observation %+v: want c1's result only (ghost's is dropped)", tool.Observation)
	}
	if answer.Source != "agent" || answer.Message != "done 完了" || answer.Extra.Run != run ||
		answer.ModelName != "test/tooler" || answer.Metrics == nil || answer.Metrics.PromptTokens != 5 {
		t.Errorf("answer step %+v", answer)
	}
}

// TestTrajectoryRefusals: a session with no messages is refused (exit 1,
// ENODATA, nothing on stdout), so is one whose document would not
// validate (EINVAL), and bad usage is exit 2.
func TestTrajectoryRefusals(t *testing.T) {
	requireFUSE(t)
	s := newServer(t)
	s.mustRequest("coder", `{"op":"send","id":"warm","session":"warm","input":"x"}`)
	testkit.Must(t, os.Mkdir(s.mnt(sessRel("empty")), 0o755))
	out, errs, code := ctxTrajectory(t, s, "agent", "trajectory", "coder", "--session", "empty")
	if code != 1 || out != "" || errs != "ctx: trajectory: ENODATA: session empty has no messages\n" {
		t.Errorf("empty session: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	out, _, code = ctxTrajectory(t, s, "agent", "trajectory", "coder", "--session", "warm")
	if code != 0 {
		t.Errorf("echo session: exit %d", code)
	}
	validateATIF(t, out)
	// A document that would not validate is refused whole: a tool call
	// whose arguments are no object (appended through the mount).
	s.mustRequest("coder", `{"op":"send","id":"b","session":"bad","input":"x"}`)
	testkit.Must(t, appendMnt(s.mnt(sessRel("bad")+"/messages.jsonl"),
		`{"role":"assistant","content":[{"type":"tool_call","id":"c1","name":"sh","arguments":[1,2]}],"ts":"2026-12-06T00:00:00.000Z"}`+"\n"))
	out, errs, code = ctxTrajectory(t, s, "agent", "trajectory", "coder", "--session", "bad")
	if code != 1 || out != "" || !strings.HasPrefix(errs, "ctx: trajectory: EINVAL") {
		t.Errorf("a session that does not validate: exit %d, stdout %.200q, stderr %q", code, out, errs)
	}
	if _, errs, code = ctxTrajectory(t, s, "agent", "trajectory"); code != 2 || !strings.Contains(errs, "usage: ctx agent trajectory AGENT") {
		t.Errorf("no agent: exit %d, stderr %q", code, errs)
	}
}

// validateATIF checks a document against ../trajectory/atif-v1.7.schema.json
// with a compiler of its own, then the rules no schema states.
func validateATIF(t *testing.T, doc string) {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	sch, err := c.Compile("../trajectory/atif-v1.7.schema.json")
	testkit.Must(t, err)
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
	if err != nil {
		t.Fatalf("not one JSON document: %v\n%s", err, doc)
	}
	if err := sch.Validate(v); err != nil {
		t.Fatalf("does not validate: %v\n%s", err, doc)
	}
	if err := trajectory.CheckRules(v); err != nil {
		t.Fatalf("ATIF rules: %v\n%s", err, doc)
	}
}

func quoteJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
