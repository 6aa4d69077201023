package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

func usageLine(model, modelID string, in, out int, age time.Duration) string {
	id := ""
	if modelID != "" {
		id = fmt.Sprintf(`,"model_id":%q`, modelID)
	}
	return fmt.Sprintf(`{"type":"usage","run":"R","model":%q%s,"input_tokens":%d,"output_tokens":%d,"ts":%q}`+"\n",
		model, id, in, out, abi.TS(time.Now().Add(-age)))
}

// usageRoot has sessions s1 and s2 of coder with usage a day, and forty
// days, old, plus malformed and undated lines; and an index directory
// that holds no session.
func usageRoot(t *testing.T) string {
	root := t.TempDir()
	day := 24 * time.Hour
	writeSession(t, root, "coder", "s1", usageLine("debug/echo", "", 10, 2, day)+
		usageLine("api/gpt", "gpt-4o", 100, 20, 40*day)+
		`{"type":"start","run":"R"}`+"\nnot json\n"+
		`{"type":"usage","model":"x/y","input_tokens":"many"}`+"\n", "")
	writeSession(t, root, "coder", "s2", usageLine("debug/echo", "", 1, 1, time.Hour)+
		`{"type":"usage","model":"x/y","input_tokens":5,"output_tokens":7}`+"\n", "")
	testkit.Must(t, os.MkdirAll(filepath.Join(root, "home/1000/agent/coder/session/index"), 0o755))
	return root
}

func TestUsageTotals(t *testing.T) {
	root := usageRoot(t)
	out, errs, code := ctxRun(root, "", "agent", "usage", "coder")
	want := `MODEL             INPUT  OUTPUT  EVENTS
api/gpt (gpt-4o)  100    20      1
debug/echo        11     3       2
x/y               5      7       1
total             116    30      4

SESSION  MODEL             INPUT  OUTPUT  EVENTS
s1       api/gpt (gpt-4o)  100    20      1
s1       debug/echo        10     2       1
s2       debug/echo        1      1       1
s2       x/y               5      7       1
`
	if out != want || code != 0 {
		t.Fatalf("code %d out:\n%s\nwant:\n%s", code, out, want)
	}
	if errs != "ctx: usage: skipped 2 malformed or undated usage lines\n" {
		t.Fatalf("stderr %q", errs)
	}
}

func TestUsageSince(t *testing.T) {
	root := usageRoot(t)
	for _, c := range []struct {
		args        []string
		in, out, ev float64
		skipped     float64
	}{
		{nil, 116, 30, 4, 2},
		{[]string{"--since", "28"}, 11, 3, 2, 3}, // the x/y line has no ts
		{[]string{"--since", "0.5"}, 1, 1, 1, 3},
		{[]string{"--since", "0"}, 0, 0, 0, 3},
		{[]string{"--session", "s1"}, 110, 22, 2, 2},
		{[]string{"--session", "s1", "--since", "28"}, 10, 2, 1, 2},
	} {
		out, _, code := ctxRun(root, "", append([]string{"agent", "usage", "coder", "--json"}, c.args...)...)
		var u map[string]any
		if err := json.Unmarshal([]byte(out), &u); err != nil || code != 0 {
			t.Fatalf("%q: code %d out %q: %v", c.args, code, out, err)
		}
		if u["input_tokens"] != c.in || u["output_tokens"] != c.out || u["events"] != c.ev || u["skipped_lines"] != c.skipped {
			t.Errorf("%q: %v", c.args, u)
		}
	}
}

func TestUsageJSONShape(t *testing.T) {
	root := usageRoot(t)
	out, _, _ := ctxRun(root, "", "agent", "usage", "coder", "--json", "--since", "28")
	var u struct {
		Agent     string
		SinceDays float64 `json:"since_days"`
		Models    []struct{ Model string }
		Sessions  []struct {
			Session     string
			InputTokens int64 `json:"input_tokens"`
		}
	}
	testkit.Must(t, json.Unmarshal([]byte(out), &u))
	if u.Agent != "coder" || u.SinceDays != 28 || len(u.Models) != 1 || u.Models[0].Model != "debug/echo" ||
		len(u.Sessions) != 2 || u.Sessions[1].Session != "s2" || u.Sessions[1].InputTokens != 1 {
		t.Fatalf("%+v", u)
	}
}

func TestUsageErrors(t *testing.T) {
	root := usageRoot(t)
	for _, c := range []struct {
		args []string
		code int
		errs string
	}{
		{[]string{"ghost"}, 1, `ctx: usage: ENOENT: no agent "ghost" (ctx agent list shows the agents)` + "\n"},
		{[]string{"coder", "--session", "nope"}, 1, `ctx: usage: ENOENT: no session "nope" of agent "coder" (ctx agent session list coder shows them)` + "\n"},
		{[]string{"coder", "--since", "-1"}, 2, "ctx: usage: --since takes a number of days, not \"-1\"\nrun 'ctx agent usage --help' for usage\n"},
	} {
		_, errs, code := ctxRun(root, "", append([]string{"agent", "usage"}, c.args...)...)
		if code != c.code || errs != c.errs {
			t.Errorf("%q: code %d errs %q", c.args, code, errs)
		}
	}
	// A defined agent with no sessions yet has no usage.
	testkit.Must(t, os.MkdirAll(filepath.Join(root, "agent/fresh.d"), 0o755))
	out, errs, code := ctxRun(root, "", "agent", "usage", "fresh")
	if code != 0 || errs != "" || !strings.HasSuffix(out, "total  0      0       0\n") {
		t.Errorf("fresh: code %d errs %q out %q", code, errs, out)
	}
}

// On a terminal, reading many sessions shows one updating line on stderr,
// cleared at the end; not on a pipe.
func TestUsageProgress(t *testing.T) {
	root := t.TempDir()
	for i := 0; i <= clienv.ProgressAfter; i++ {
		writeSession(t, root, "coder", fmt.Sprintf("s%d", i), "", "")
	}
	ptm, pts, err := pty.Open()
	testkit.Must(t, err)
	defer ptm.Close()
	var out strings.Builder
	e := &clienv.Env{Stdout: &out, Stderr: pts, Uid: 1000,
		Getenv: func(k string) string {
			if k == "CTX_ROOT" {
				return root
			}
			return ""
		}}
	code := run(e, []string{"agent", "usage", "coder"})
	pts.Close()
	shown, _ := io.ReadAll(ptm) // EIO once the terminal's other end is closed
	if code != 0 || !strings.HasPrefix(string(shown), "\rctx: usage: reading session 1 of 301") || !strings.HasSuffix(string(shown), "\r\x1b[K") {
		t.Fatalf("code %d stderr %q", code, shown)
	}
	if _, errs, _ := ctxRun(root, "", "agent", "usage", "coder"); errs != "" {
		t.Fatalf("stderr on a pipe: %q", errs)
	}
}
