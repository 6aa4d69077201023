package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// mixedProgram is a jsonl agent: an input with "fail" fails, one with
// "sleep" sleeps until cancelled or killed, any other is answered with a
// message ("答复：" and the input) and usage of model x/y, or of p/q
// (model id q-1) when the input says "other".
const mixedProgram = `#!/bin/sh
read -r x
case "$x" in
*fail*) echo '{"type":"message","role":"assistant","content":[{"type":"text","text":"Failing now"}]}'; exit 1;;
*sleep*) exec sleep 60;;
esac
printf '{"type":"message","role":"assistant","content":[{"type":"text","text":"答复：%s"}]}\n' "$x"
case "$x" in
*other*) echo '{"type":"usage","model":"p/q","model_id":"q-1","input_tokens":3,"output_tokens":4}';;
*) echo '{"type":"usage","model":"x/y","input_tokens":5,"output_tokens":7}';;
esac
`

func newMixedServer(t *testing.T) *server {
	requireFUSE(t)
	s := newServerWith(t, func(s *server) {
		s.define("mixed", map[string]string{"abi": "jsonl", "program": mixedProgram})
	})
	openToAll(t, s.root)
	return s
}

// ctxSplit runs the real client as root with CTX_ROOT set and returns its
// stdout, stderr and exit status apart.
func ctxSplit(t testing.TB, s *server, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return ctxSplitAs(t, s, nil, args...)
}

// ctxSplitAs is ctxSplit as c (nil: root).
func ctxSplitAs(t testing.TB, s *server, c *cred, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return ctxSplitWithin(t, s, c, cmdLimit, args...)
}

// ctxSplitWithin is ctxSplitAs with a time limit of its own: a benchmark's
// command over 10,000 sessions may take longer than any test's.
func ctxSplitWithin(t testing.TB, s *server, c *cred, limit time.Duration, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(ctxBin, args...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/", "CTX_ROOT=" + s.root}
	if c != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: c.uid, Gid: c.gid, Groups: c.groups}}
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	done := make(chan error, 1)
	testkit.Must(t, cmd.Start())
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			testkit.Must(t, err)
		}
	case <-time.After(limit):
		cmd.Process.Kill()
		t.Fatalf("ctx %q did not finish within %v", args, limit)
	}
	return o.String(), e.String(), code
}

// sendTo sends input to agent's session and returns the run id.
func sendTo(t *testing.T, s *server, agent, session, id, input string) string {
	t.Helper()
	frames := s.mustRequest(agent, fmt.Sprintf(`{"op":"send","id":%q,"session":%q,"input":%q}`, id, session, input))
	if len(frames) == 0 || frames[0]["type"] != "start" || frames[len(frames)-1]["type"] != "done" {
		t.Fatalf("send %q: %v", input, frames)
	}
	return frames[0]["run"].(string)
}

// startSleeping sends a sleeping run in the background and waits until the
// server runs it; it returns the run id.
func startSleeping(t *testing.T, s *server, session, id string) string {
	t.Helper()
	go s.request("mixed", fmt.Sprintf(`{"op":"send","id":%q,"session":%q,"input":"sleep please"}`, id, session))
	var run string
	eventually(t, 10*time.Second, id+" running", func() bool {
		st, err := s.request("mixed", fmt.Sprintf(`{"op":"status","session":%q}`, session))
		if err != nil || len(st) != 1 {
			return false
		}
		runs, _ := st[0]["runs"].([]any)
		for _, r := range runs {
			if m := r.(map[string]any); m["phase"] == "running" {
				run = m["run"].(string)
				return true
			}
		}
		return false
	})
	return run
}

// runRows parses runs' tab-separated output into run id -> fields.
func runRows(t *testing.T, out string) (ids []string, rows map[string][]string) {
	t.Helper()
	rows = map[string][]string{}
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if l == "" {
			continue
		}
		f := strings.Split(l, "\t")
		if len(f) != 5 {
			t.Fatalf("runs line %q: %d fields", l, len(f))
		}
		ids = append(ids, f[0])
		rows[f[0]] = f
	}
	return ids, rows
}

// TestRunsEndToEnd: a session with an ok, a failed, a cancelled, a running
// and then (after the server is killed) an interrupted run; runs lists
// them oldest first with the right status, --grep finds Chinese text in an
// input and in an answer, --interrupted keeps the interrupted run.
func TestRunsEndToEnd(t *testing.T) {
	s := newMixedServer(t)
	okRun := sendTo(t, s, "mixed", "s", "c1", "hello 你好世界")
	errRun := sendTo(t, s, "mixed", "s", "c2", "please fail")
	cancelRun := startSleeping(t, s, "s", "c3")
	if f := s.mustRequest("mixed", `{"op":"cancel","id":"c3"}`); len(f) != 1 || f[0]["cancelled"] != true {
		t.Fatalf("cancel: %v", f)
	}
	eventually(t, 10*time.Second, "c3 cancelled", func() bool { return s.stateOf("mixed", "s") == "cancelled" })
	liveRun := startSleeping(t, s, "s", "c4")

	out, errs, code := ctxSplit(t, s, "agent", "runs", "mixed", "--session", "s")
	ids, rows := runRows(t, out)
	if code != 0 || errs != "" || strings.Join(ids, " ") != strings.Join([]string{okRun, errRun, cancelRun, liveRun}, " ") {
		t.Fatalf("runs: code %d errs %q out:\n%s", code, errs, out)
	}
	for run, want := range map[string][]string{okRun: {"ok", "hello 你好世界"}, errRun: {"error", "please fail"},
		cancelRun: {"cancelled", "sleep please"}, liveRun: {"running", "sleep please"}} {
		if r := rows[run]; r[1] != want[0] || r[4] != want[1] || r[2] == "-" || (r[3] == "-") != (want[0] == "running") {
			t.Errorf("run %s: %q, want status %s input %q", run, r, want[0], want[1])
		}
	}

	s.restart(syscall.SIGKILL)
	out, _, code = ctxSplit(t, s, "agent", "runs", "mixed", "--session", "s")
	if _, rows = runRows(t, out); code != 0 || rows[liveRun][1] != "interrupted" || rows[okRun][1] != "ok" {
		t.Fatalf("after the kill: code %d out:\n%s", code, out)
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--grep", "世界"}, []string{okRun}},
		{[]string{"--grep", "答复"}, []string{okRun}},
		{[]string{"--grep", "FAILING"}, []string{errRun}},
		{[]string{"--grep", "sleep"}, []string{cancelRun, liveRun}},
		{[]string{"--interrupted"}, []string{liveRun}},
		{[]string{"--interrupted", "--grep", "hello"}, nil},
	} {
		out, _, code := ctxSplit(t, s, append([]string{"agent", "runs", "mixed", "--session", "s"}, c.args...)...)
		if ids, _ := runRows(t, out); code != 0 || strings.Join(ids, " ") != strings.Join(c.want, " ") {
			t.Errorf("%q: code %d out:\n%s", c.args, code, out)
		}
	}

	out, _, _ = ctxSplit(t, s, "agent", "runs", "mixed", "--session", "s", "--json", "--interrupted")
	var r struct {
		Run, Status, Error, Input string
		Interrupted               bool
		Ended                     string
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Run != liveRun || r.Status != "interrupted" ||
		!r.Interrupted || r.Error != "EINTR" || r.Ended == "" {
		t.Fatalf("--json: %q (%v)", out, err)
	}
}

// TestRunsNotFound: an unknown agent or session is named, exit 1.
func TestRunsNotFound(t *testing.T) {
	s := newMixedServer(t)
	sendTo(t, s, "mixed", "s", "c1", "hello")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"runs", "ghost"}, `ctx: runs: ENOENT: no agent "ghost" (ctx agent list shows the agents)`},
		{[]string{"runs", "mixed", "--session", "nope"}, `ctx: runs: ENOENT: no session "nope" of agent "mixed" (ctx agent session list mixed shows them)`},
		{[]string{"usage", "mixed", "--session", "nope"}, `ctx: usage: ENOENT: no session "nope" of agent "mixed" (ctx agent session list mixed shows them)`},
		{[]string{"usage", "ghost"}, `ctx: usage: ENOENT: no agent "ghost" (ctx agent list shows the agents)`},
		{[]string{"session", "list", "ghost"}, `ctx: session list: ENOENT: no agent "ghost" (ctx agent list shows the agents)`},
	} {
		_, errs, code := ctxSplit(t, s, append([]string{"agent"}, c.args...)...)
		if code != 1 || errs != c.want+"\n" || strings.Contains(errs, s.store) {
			t.Errorf("%q: code %d stderr %q, want %q", c.args, code, errs, c.want)
		}
	}
	// A defined agent that was never used has no sessions: an empty
	// list, not an error.
	if out, errs, code := ctxSplit(t, s, "agent", "session", "list", "coder"); code != 0 || out != "" || errs != "" {
		t.Errorf("session list of an unused agent: code %d out %q errs %q", code, out, errs)
	}
}

// TestUsageEndToEnd: totals per model across the agent's sessions and per
// session, from the server's own usage events (debug/echo's, a program's)
// and one appended through the mount forty days old.
func TestUsageEndToEnd(t *testing.T) {
	s := newMixedServer(t)
	sendTo(t, s, "mixed", "u1", "c1", "hi")
	sendTo(t, s, "mixed", "u1", "c2", "the other one")
	sendTo(t, s, "mixed", "u2", "c3", "hi")
	sendTo(t, s, "coder", "e1", "c4", "12345678") // echo: 2 tokens in, 2 out
	sendTo(t, s, "coder", "e2", "c5", "1234")
	old := time.Now().Add(-40 * 24 * time.Hour).UTC().Format("2006-01-02T15:04:05.000Z")
	f, err := os.OpenFile(s.mnt("home/0/agent/mixed/session/u2/events.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
	testkit.Must(t, err)
	fmt.Fprintf(f, `{"type":"usage","model":"x/y","input_tokens":100,"output_tokens":200,"ts":%q}`+"\n", old)
	testkit.Must(t, f.Close())

	out, errs, code := ctxSplit(t, s, "agent", "usage", "mixed")
	want := `MODEL      INPUT  OUTPUT  EVENTS
p/q (q-1)  3      4       1
x/y        110    214     3
total      113    218     4

SESSION  MODEL      INPUT  OUTPUT  EVENTS
u1       p/q (q-1)  3      4       1
u1       x/y        5      7       1
u2       x/y        105    207     2
`
	if out != want || errs != "" || code != 0 {
		t.Fatalf("usage: code %d errs %q out:\n%s\nwant:\n%s", code, errs, out, want)
	}
	type totals struct {
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
		Events       int64
		Models       []struct {
			Model, ModelID string
			InputTokens    int64 `json:"input_tokens"`
		}
		Sessions []struct{ Session string }
	}
	for _, c := range []struct {
		args            []string
		in, out, events int64
		sessions        int
	}{
		{[]string{"mixed"}, 113, 218, 4, 2},
		{[]string{"mixed", "--since", "28"}, 13, 18, 3, 2},
		{[]string{"mixed", "--since", "0"}, 0, 0, 0, 0},
		{[]string{"mixed", "--session", "u2"}, 105, 207, 2, 1},
		{[]string{"coder"}, 3, 3, 2, 2},
	} {
		out, _, code := ctxSplit(t, s, append([]string{"agent", "usage", "--json"}, c.args...)...)
		var u totals
		if err := json.Unmarshal([]byte(out), &u); err != nil || code != 0 {
			t.Fatalf("%q: code %d out %q: %v", c.args, code, out, err)
		}
		if u.InputTokens != c.in || u.OutputTokens != c.out || u.Events != c.events || len(u.Sessions) != c.sessions {
			t.Errorf("%q: %+v", c.args, u)
		}
	}
}

// TestSessionListJSON: one object per session in list order, with the
// persona fields written to meta.json through the mount.
func TestSessionListJSON(t *testing.T) {
	s := newMixedServer(t)
	sendTo(t, s, "coder", "first", "c1", "one")
	sendTo(t, s, "coder", "second", "c2", "two")
	meta := `{"client":"ctx","scope":"private","name":"Ada","self_id":"Ada-1","rule":"Be brief.","model":"debug/echo","reasoning":"low"}`
	testkit.Must(t, os.WriteFile(s.mnt(sessRel("first")+"/meta.json"), []byte(meta), 0o600))
	out, errs, code := ctxSplit(t, s, "agent", "session", "list", "coder", "--json")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || errs != "" || len(lines) != 2 {
		t.Fatalf("code %d errs %q out:\n%s", code, errs, out)
	}
	type info struct {
		Name      string
		State     string
		UpdatedAt int64 `json:"updated_at"`
		CreatedAt int64 `json:"created_at"`
		Meta      map[string]string
	}
	var second, first info
	testkit.Must(t, json.Unmarshal([]byte(lines[0]), &second))
	testkit.Must(t, json.Unmarshal([]byte(lines[1]), &first))
	now := time.Now().Unix()
	if second.Name != "second" || second.State != "done" || second.Meta != nil || second.UpdatedAt < now-60 || second.CreatedAt > second.UpdatedAt {
		t.Errorf("second: %+v", second)
	}
	wantMeta := map[string]string{"name": "Ada", "self_id": "ada-1", "rule": "Be brief.", "model": "debug/echo", "reasoning": "low"}
	if first.Name != "first" || first.State != "done" || fmt.Sprint(first.Meta) != fmt.Sprint(wantMeta) {
		t.Errorf("first: %+v", first)
	}
}
