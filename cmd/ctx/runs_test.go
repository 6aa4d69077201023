package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/proto"
)

// writeSession makes a session directory under root's home for uid 1000
// with the given logs.
func writeSession(t *testing.T, root, agent, session, events, messages string) string {
	t.Helper()
	dir := filepath.Join(root, "home/1000/agent", agent, "session", session)
	testkit.Must(t, os.MkdirAll(dir, 0o755))
	testkit.Must(t, os.WriteFile(filepath.Join(dir, abi.FileEvents), []byte(events), 0o644))
	testkit.Must(t, os.WriteFile(filepath.Join(dir, abi.FileMessages), []byte(messages), 0o644))
	return dir
}

const runsEvents = `{"type":"start","id":"R1","run":"R1","ts":"2026-01-01T00:00:01.000Z"}
{"type":"usage","run":"R1","model":"debug/echo","input_tokens":1,"output_tokens":1,"ts":"2026-01-01T00:00:01.500Z"}
{"type":"done","run":"R1","status":"ok","ts":"2026-01-01T00:00:02.000Z"}
not json at all
null
{"type":"start","id":"R2","run":"R2","ts":"2026-01-01T00:00:03.000Z"}
{"type":"error","run":"R2","code":"EIO","message":"x","ts":"2026-01-01T00:00:03.100Z"}
{"type":"done","run":"R2","status":"error","ts":"2026-01-01T00:00:04.000Z"}
{"type":"start","id":"R3","run":"R3","ts":"2026-01-01T00:00:05.000Z"}
{"type":"cancel","run":"R3","cancelled":true}
{"type":"done","run":"R3","status":"cancelled","ts":"2026-01-01T00:00:06.000Z"}
{"type":"start","id":"R4","run":"R4","ts":"2026-01-01T00:00:07.000Z"}
{"type":"error","run":"R4","code":"EINTR","message":"the run was interrupted","ts":"2026-01-01T00:00:09.000Z"}
{"type":"done","run":"R4","status":"error","interrupted":true,"ts":"2026-01-01T00:00:09.000Z"}
{"type":"start","id":"R5","run":"R5","ts":"2026-01-01T00:00:10.000Z"}
{"type":"start","id":"R6","run":"R6","ts":"2026-01-01T00:00:11.000Z"}
{"type":"done","run":"R6","status":7}
{"type":"done","run":"nobody","status":"ok"}
`

const runsMessages = `{"role":"user","run":"R1","content":"hello\nsecond line"}
{"role":"assistant","run":"R1","content":[{"type":"text","text":"hi there"}]}
{"role":"user","run":"R2","content":"please fail"}
{"role":"assistant","run":"R2","content":[{"type":"text","text":"会话里有中文"}]}
{"role":"user","run":"R3","content":"Un ÉTÉ chaud\tand a tab \u001b[31m"}
{"role":"user","run":"R4","content":"long job"}
{"role":"user","run":"R5","content":"still going"}
{"role":"user","run":"R6","content":"lost"}
{"role":"user","run":"R2","content":"a second user message is not the input"}
{broken
`

// runsAgent answers status with R5 running; everything else is refused.
func runsAgent(t *testing.T) *fakeAgent {
	return newFakeAgent(t, func(r *proto.Request) []string {
		if r.Op == proto.OpStatus {
			return []string{`{"type":"status","session":"s","state":"active","runs":[{"run":"R5","phase":"running"}],"updated_at":1}`}
		}
		return []string{`{"type":"error","code":"EINVAL","message":"no"}`}
	})
}

func TestRunsStatuses(t *testing.T) {
	a := runsAgent(t)
	long := `{"type":"start","run":"RL","pad":"` + strings.Repeat("x", abi.MaxLineBytes) + `"}` + "\n"
	writeSession(t, a.root, "coder", "s", runsEvents+long, runsMessages)
	out, errs, code := ctxRun(a.root, "", "agent", "runs", "coder", "--session", "s")
	want := "R1\tok\t2026-01-01T00:00:01.000Z\t2026-01-01T00:00:02.000Z\thello\n" +
		"R2\terror\t2026-01-01T00:00:03.000Z\t2026-01-01T00:00:04.000Z\tplease fail\n" +
		"R3\tcancelled\t2026-01-01T00:00:05.000Z\t2026-01-01T00:00:06.000Z\tUn ÉTÉ chaud and a tab  [31m\n" +
		"R4\tinterrupted\t2026-01-01T00:00:07.000Z\t2026-01-01T00:00:09.000Z\tlong job\n" +
		"R5\trunning\t2026-01-01T00:00:10.000Z\t-\tstill going\n" +
		"R6\tinterrupted\t2026-01-01T00:00:11.000Z\t-\tlost\n"
	if out != want || code != 0 {
		t.Fatalf("code %d out:\n%s\nwant:\n%s", code, out, want)
	}
	// not json, null, the done with a number status, the over-long line,
	// {broken: skipped and counted, never fatal.
	if errs != "ctx: runs: skipped 5 malformed log lines\n" {
		t.Fatalf("stderr %q", errs)
	}
	if r := a.last(); r.Op != proto.OpStatus || r.Session != "s" {
		t.Fatalf("status request %+v", r)
	}
}

func TestRunsFilters(t *testing.T) {
	a := runsAgent(t)
	writeSession(t, a.root, "coder", "s", runsEvents, runsMessages)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--grep", "中文"}, "R2"},
		{[]string{"--grep", "été"}, "R3"},
		{[]string{"--grep", "HI THERE"}, "R1"},
		{[]string{"--grep", "second user"}, "R2"},
		{[]string{"--interrupted"}, "R4 R6"},
		{[]string{"--interrupted", "--grep", "LOST"}, "R6"},
		{[]string{"--grep", "nowhere"}, ""},
	} {
		out, _, code := ctxRun(a.root, "", append([]string{"agent", "runs", "coder", "--session", "s"}, c.args...)...)
		var ids []string
		for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			if id, _, ok := strings.Cut(l, "\t"); ok {
				ids = append(ids, id)
			}
		}
		if got := strings.Join(ids, " "); got != c.want || code != 0 {
			t.Errorf("%q: runs %q code %d, want %q", c.args, got, code, c.want)
		}
	}
}

func TestRunsJSON(t *testing.T) {
	a := runsAgent(t)
	writeSession(t, a.root, "coder", "s", runsEvents, runsMessages)
	out, _, code := ctxRun(a.root, "", "agent", "runs", "coder", "--session", "s", "--json")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) != 6 {
		t.Fatalf("code %d out %q", code, out)
	}
	var r map[string]any
	testkit.Must(t, json.Unmarshal([]byte(lines[3]), &r))
	if r["run"] != "R4" || r["status"] != "interrupted" || r["interrupted"] != true || r["error"] != "EINTR" || r["input"] != "long job" {
		t.Fatalf("R4 %v", r)
	}
	testkit.Must(t, json.Unmarshal([]byte(lines[2]), &r))
	if r["input"] != "Un ÉTÉ chaud\tand a tab \x1b[31m" { // JSON keeps the text as it is
		t.Fatalf("R3 input %q", r["input"])
	}
}

// With the server down, a run without an end cannot be known to run: it
// is shown as interrupted, and stderr says why.
func TestRunsServerDown(t *testing.T) {
	root := t.TempDir()
	writeSession(t, root, "coder", "s", runsEvents, runsMessages)
	out, errs, code := ctxRun(root, "", "agent", "runs", "coder", "--session", "s", "--interrupted")
	if code != 0 || !strings.Contains(out, "R5\tinterrupted") || !strings.Contains(errs, "shown as interrupted") {
		t.Fatalf("code %d out %q errs %q", code, out, errs)
	}
}

func TestRunsMissing(t *testing.T) {
	root := t.TempDir()
	writeSession(t, root, "coder", "s", "", "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"coder", "--session", "nope"}, `ctx: runs: ENOENT: no session "nope" of agent "coder" (ctx agent session list coder shows them)` + "\n"},
		{[]string{"ghost"}, `ctx: runs: ENOENT: no agent "ghost" (ctx agent list shows the agents)` + "\n"},
		{[]string{"coder", "--shared", "team"}, `ctx: runs: ENOENT: no shared space "team" (ls ` + filepath.Join(root, "shared") + ` shows the spaces)` + "\n"},
	} {
		_, errs, code := ctxRun(root, "", append([]string{"agent", "runs"}, c.args...)...)
		if code != 1 || errs != c.want {
			t.Errorf("%q: code %d errs %q, want %q", c.args, code, errs, c.want)
		}
	}
	// An empty session has no runs.
	if out, errs, code := ctxRun(root, "", "agent", "runs", "coder", "--session", "s"); out != "" || errs != "" || code != 0 {
		t.Errorf("empty session: out %q errs %q code %d", out, errs, code)
	}
}
