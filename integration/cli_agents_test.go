package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// The coding-agent CLIs as agents (SPEC 16), end to end: the real server
// runs the real CLIs (agent/cli/testdata/npm, installed by scripts/deps.sh)
// against @copilotkit/aimock serving agent/cli's fixtures, plus a slow one.

// cliNPM is where scripts/deps.sh installs the CLIs.
var cliNPM, _ = filepath.Abs("../agent/cli/testdata/npm/node_modules")

// needCLI skips, or fails under CTXFS_REQUIRE_CLIS=1 (CI), when something
// the real runs need is not installed.
func needCLI(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		return
	}
	msg := path + " is not installed; scripts/deps.sh installs it"
	if os.Getenv("CTXFS_REQUIRE_CLIS") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// cliCase is one CLI's definition and what its runs show.
type cliCase struct {
	cli, program, model string
	v1                  bool   // the endpoint takes /v1 (Codex, opencode)
	unknown             string // a session id of the CLI's shape that does not exist
	tool, toolName      string // the prompt of the tool fixture, and the tool's name in tool_call
}

var cliCases = []cliCase{
	{"claude-code", "claude", "", false, "00000000-0000-4000-8000-000000000000", "ctxfs-tool-claude", "Bash"},
	{"codex", "codex", "gpt-5.1-codex", true, "00000000-0000-4000-8000-000000000000", "ctxfs-tool-codex", "command_execution"},
	{"gemini", "gemini", "gemini-2.5-flash", false, "00000000-0000-4000-8000-000000000000", "ctxfs-tool-gemini", "read_file"},
	{"opencode", "opencode", "anthropic/claude-sonnet-4-5", true, "ses_00000000000000000000000000", "ctxfs-tool-opencode", "bash"},
}

// cliSimulator runs aimock with agent/cli's fixtures and a slow one
// ("ctxfs-slow…": one character a second), and returns its URL.
func cliSimulator(t *testing.T) string {
	t.Helper()
	llmock, _ := filepath.Abs("../agent/provider/testdata/aimock/node_modules/.bin/llmock")
	needCLI(t, llmock)
	var fx struct {
		Fixtures []any `json:"fixtures"`
	}
	testkit.Must(t, json.Unmarshal([]byte(fileBytes(t, "../agent/cli/testdata/fixtures/fixtures.json")), &fx))
	fx.Fixtures = append(fx.Fixtures, map[string]any{"match": map[string]any{"userMessage": "ctxfs-slow"},
		"response": map[string]any{"content": "slowly, one character a second, too late"}, "latency": 1000, "chunkSize": 1})
	file := filepath.Join(t.TempDir(), "fixtures.json")
	b, _ := json.Marshal(fx)
	testkit.Must(t, os.WriteFile(file, b, 0o644))
	return testkit.Aimock(t, llmock, file)
}

// aimockJournal is aimock's request journal, raw.
func aimockJournal(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/__aimock/journal")
	testkit.Must(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	testkit.Must(t, err)
	return string(b)
}

// journalHas reports whether one request of the journal carried all of words.
func journalHas(t *testing.T, base string, words ...string) bool {
	var entries []json.RawMessage
	testkit.Must(t, json.Unmarshal([]byte(aimockJournal(t, base)), &entries))
	for _, e := range entries {
		all := true
		for _, w := range words {
			all = all && strings.Contains(string(e), w)
		}
		if all {
			return true
		}
	}
	return false
}

// cliKey is a key no fixture, log or file holds by chance.
func cliKey(name string) string {
	return fmt.Sprintf("sk-ctxfs-%s-%d-key", name, time.Now().UnixNano())
}

// cliDefinition is the control files of c's agent: the CLI, its model
// and endpoint, and its key in the server's CTXFS_CLI_KEY.
func cliDefinition(c cliCase, base string) map[string]string {
	endpoint := base
	if c.v1 {
		endpoint += "/v1"
	}
	files := map[string]string{"cli": c.cli + "\n", "endpoint": endpoint + "\n", "api_key_env": "CTXFS_CLI_KEY\n"}
	if c.model != "" {
		files["model_id"] = c.model + "\n"
	}
	return files
}

// newCLIServer starts a server with the agent "cli" of c's CLI, its
// program a script that execs the installed CLI, and key in the server's
// environment.
func newCLIServer(t *testing.T, c cliCase, base, key string) *server {
	t.Helper()
	bin := filepath.Join(cliNPM, ".bin", c.program)
	needCLI(t, bin)
	files := cliDefinition(c, base)
	files["program"] = "#!/bin/sh\nexec " + bin + " \"$@\"\n"
	return newFuseServerWith(t, func(s *server) {
		s.env = append(s.env, "CTXFS_CLI_KEY="+key)
		s.define("cli", files)
	})
}

// cliSend sends input to the agent "cli" in session and returns the frames.
func (s *server) cliSend(session, id, input string) []frame {
	s.t.Helper()
	frames, err := s.requestWithin("cli", fmt.Sprintf(`{"op":"send","id":%q,"session":%q,"input":%q}`, id, session, input), 3*time.Minute)
	if err != nil || len(frames) == 0 || frames[len(frames)-1]["type"] != "done" {
		s.t.Fatalf("send %s to %s: %v %v\nlog:\n%s", input, session, err, frames, s.logText())
	}
	return frames
}

// frameTypes lists the frames' types, and the status of done.
func frameTypes(frames []frame) string {
	var types []string
	for _, f := range frames {
		typ := f["type"].(string)
		switch typ {
		case "done":
			typ += " " + f["status"].(string)
		case "error":
			typ += " " + f["code"].(string)
		}
		types = append(types, typ)
	}
	return strings.Join(types, ",")
}

// readOr is a file's content, or the error reading it.
func readOr(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// cliMeta is the session's meta.json, read through the mount.
func (s *server) cliMeta(t *testing.T, session string) map[string]any {
	var m map[string]any
	testkit.Must(t, json.Unmarshal([]byte(fileBytes(t, s.mnt("home/0/agent/cli/session/"+session+"/meta.json"))), &m))
	return m
}

// TestCLIAgents: each CLI, run by the real server as agent "cli": a text
// answer; a tool call and its result, recorded and exported as ATIF; a
// second send that resumes the CLI's session; a CLI session that is gone;
// a provider error; a cancel during a slow answer; the key nowhere.
func TestCLIAgents(t *testing.T) {
	base := cliSimulator(t)
	for _, c := range cliCases {
		t.Run(c.cli, func(t *testing.T) {
			t.Parallel()
			key := cliKey(c.cli)
			s := newCLIServer(t, c, base, key)
			testkit.Must(t, os.MkdirAll(s.mnt("home/0/agent/cli/root"), 0o755))
			testkit.Must(t, os.WriteFile(s.mnt("home/0/agent/cli/root/note.txt"), []byte("the note says 42\n"), 0o644))
			checkCLIText(t, s)
			checkCLITool(t, s, c)
			checkCLIResume(t, s, c, base)
			checkCLIErrors(t, s, c)
			checkCLICancel(t, s, c, base)
			checkSecretNowhere(t, s, key)
		})
	}
}

// checkCLIText: a text answer streams as delta, message, usage, done ok,
// and messages.jsonl through the mount holds it.
func checkCLIText(t *testing.T, s *server) {
	frames := s.cliSend("text", "t1", "ctxfs-hello")
	got := frameTypes(frames)
	for _, want := range []string{"delta", "message", "usage", "done ok"} {
		if !strings.Contains(got, want) {
			t.Errorf("text answer: frames %s lack %s\n%v", got, want, frames)
		}
	}
	if msgs := fileBytes(t, s.mnt("home/0/agent/cli/session/text/messages.jsonl")); !strings.Contains(msgs, `"Hello from aimock."`) {
		t.Errorf("messages.jsonl through the mount:\n%s", msgs)
	}
}

// checkCLITool: the fixture's tool call reads note.txt in the run's cwd
// (the agent's root/); tool_call and tool_result are recorded, paired,
// and the trajectory validates as ATIF v1.7 with the call answered.
func checkCLITool(t *testing.T, s *server, c cliCase) {
	frames := s.cliSend("tool", "w1", c.tool)
	var callID string
	for _, f := range frames {
		if f["type"] == "tool_call" && f["name"] == c.toolName {
			callID, _ = f["id"].(string)
		}
	}
	if callID == "" || !strings.Contains(frameTypes(frames), "tool_result") || frames[len(frames)-1]["status"] != "ok" {
		t.Fatalf("tool run: %s\n%v\nlog:\n%s", frameTypes(frames), frames, s.logText())
	}
	events := fileBytes(t, s.mnt("home/0/agent/cli/session/tool/events.jsonl"))
	if !strings.Contains(events, `"type":"tool_call"`) || !strings.Contains(events, `"type":"tool_result"`) {
		t.Errorf("events.jsonl lacks the call or its result:\n%s", events)
	}
	out, errs, code := ctxTrajectory(t, s, "agent", "trajectory", "cli", "--session", "tool")
	if code != 0 {
		t.Fatalf("trajectory: exit %d, %s", code, errs)
	}
	validateATIF(t, out)
	var doc struct{ Steps []atifStep }
	testkit.Must(t, json.Unmarshal([]byte(out), &doc))
	paired := false
	for _, st := range doc.Steps {
		for _, tc := range st.ToolCalls {
			if tc.ID == callID && st.Observation != nil && len(st.Observation.Results) > 0 && st.Observation.Results[0].SourceCallID == callID {
				paired = true
			}
		}
	}
	if !paired {
		t.Errorf("the trajectory does not pair call %s with its result:\n%s", callID, out)
	}
}

// checkCLIResume: the first send records the CLI's session (meta.json's
// cli_session; by-uuid for a UUID); the second resumes it (the same id,
// and aimock saw the first turn sent again).
func checkCLIResume(t *testing.T, s *server, c cliCase, base string) {
	remember, recall := "ctxfs-remember for ctxfs "+c.cli, "ctxfs-recall for ctxfs "+c.cli
	if f := s.cliSend("conv", "r1", remember); f[len(f)-1]["status"] != "ok" {
		t.Fatalf("first send: %v", f)
	}
	id, _ := s.cliMeta(t, "conv")["cli_session"].(string)
	byUUID := s.mnt("home/0/agent/cli/session/index/by-uuid/" + id)
	switch {
	case id == "":
		t.Fatalf("meta.json has no cli_session: %v", s.cliMeta(t, "conv"))
	case strings.HasPrefix(id, "ses_"): // opencode's: not a UUID, meta.json only
	case readOr(byUUID) != "conv\n":
		t.Errorf("by-uuid/%s holds %q", id, readOr(byUUID))
	}
	if f := s.cliSend("conv", "r2", recall); f[len(f)-1]["status"] != "ok" || !strings.Contains(fmt.Sprint(f), "The word was pelican.") {
		t.Fatalf("resumed send: %v", f)
	}
	if again, _ := s.cliMeta(t, "conv")["cli_session"].(string); again != id {
		t.Errorf("cli_session changed from %s to %s", id, again)
	}
	if !journalHas(t, base, recall, remember) {
		t.Errorf("no request to aimock carried %q with the earlier %q: the CLI did not resume", recall, remember)
	}
}

// checkCLIErrors: a CLI session that cannot be resumed is ENOENT and done
// error, meta.json unchanged; an HTTP 400 is error EINVAL and done error.
func checkCLIErrors(t *testing.T, s *server, c cliCase) {
	s.cliSend("lost", "l1", "ctxfs-hello")
	meta := s.mnt("home/0/agent/cli/session/lost/meta.json")
	m := s.cliMeta(t, "lost")
	m["cli_session"] = c.unknown
	b, _ := json.Marshal(m)
	testkit.Must(t, os.WriteFile(meta, b, 0o644))
	before := fileBytes(t, meta)
	if got := frameTypes(s.cliSend("lost", "l2", "ctxfs-recall")); !strings.Contains(got, "error ENOENT") || !strings.HasSuffix(got, "done error") {
		t.Errorf("resuming a lost CLI session: %s", got)
	}
	if after := fileBytes(t, meta); after != before {
		t.Errorf("meta.json changed after a failed resume: %s -> %s", before, after)
	}
	if got := frameTypes(s.cliSend("bad", "b1", "ctxfs-bad-request")); !strings.Contains(got, "error EINVAL") || !strings.HasSuffix(got, "done error") {
		t.Errorf("an HTTP 400: %s", got)
	}
	// A cli_session a user wrote that could be read as a flag never
	// reaches the CLI's command line.
	m["cli_session"] = "--dangerously-skip-permissions"
	b, _ = json.Marshal(m)
	testkit.Must(t, os.WriteFile(meta, b, 0o644))
	if got := frameTypes(s.cliSend("lost", "l3", "ctxfs-hello")); got != "start,error EINVAL,done error" {
		t.Errorf("a cli_session shaped as a flag: %s", got)
	}
}

// checkCLICancel: a cancel while the provider streams slowly ends the run
// done cancelled, and nothing the CLI prints later is recorded.
func checkCLICancel(t *testing.T, s *server, c cliCase, base string) {
	prompt := "ctxfs-slow for ctxfs " + c.cli
	done := make(chan []frame, 1)
	go func() {
		f, _ := s.requestWithin("cli", fmt.Sprintf(`{"op":"send","id":"s1","session":"slow","input":%q}`, prompt), 3*time.Minute)
		done <- f
	}()
	eventually(t, 2*time.Minute, "the slow request at aimock", func() bool { return journalHas(t, base, prompt) })
	if f, err := s.request("cli", `{"op":"cancel","id":"s1"}`); err != nil || len(f) != 1 || f[0]["cancelled"] != true {
		t.Fatalf("cancel: %v %v", f, err)
	}
	var frames []frame
	select {
	case frames = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the cancelled run did not end")
	}
	if got := frameTypes(frames); !strings.HasSuffix(got, "done cancelled") {
		t.Errorf("cancelled run: %s", got)
	}
	events := s.mnt("home/0/agent/cli/session/slow/events.jsonl")
	before := fileBytes(t, events)
	time.Sleep(3 * time.Second) // aimock would have sent three more characters
	if after := fileBytes(t, events); after != before || strings.Contains(after, "too late") {
		t.Errorf("events after the cancel changed or hold the answer:\n%s", after)
	}
	if !strings.Contains(before, `"status":"cancelled"`) {
		t.Errorf("events.jsonl lacks done cancelled:\n%s", before)
	}
}

// TestCLIHomeHoldsSQLite: the CLIs keep their sessions in SQLite under
// HOME (opencode, Codex), in the agent's root/ through the mount. As the
// agent's user: a directory's fsync succeeds (SQLite syncs a journal's
// directory before deleting it, and fails the commit otherwise), and a
// database is opened again (SQLite opens an existing file O_NOFOLLOW).
func TestCLIHomeHoldsSQLite(t *testing.T) {
	s := newFuseServer(t)
	user := &cred{uid: 1000, gid: 1000}
	dir := s.mnt("home/1000/agent/coder/root/home/agent")
	if out, err := bashAs(t, user, "mkdir -p "+dir); err != nil {
		t.Fatalf("mkdir: %v %s", err, out)
	}
	out, err := runCmd(t, user, nil, "/usr/bin/python3", "-c", `
import os, sqlite3, sys
fd = os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd); os.close(fd)
for i in range(3):
    c = sqlite3.connect(sys.argv[1] + "/state.sqlite")
    c.execute("pragma synchronous=full")
    c.execute("create table if not exists t(a)"); c.execute("insert into t values(?)", (i,)); c.commit()
    print(c.execute("select count(*) from t").fetchone()[0]); c.close()
`, dir)
	if err != nil || out != "1\n2\n3\n" {
		t.Fatalf("SQLite under HOME on the mount: %v\n%s", err, out)
	}
}

// geminiPackage is Gemini CLI's npm package: one bundle, run by node.
var geminiPackage = filepath.Join(cliNPM, "@google/gemini-cli")

// TestCLIGeminiChroot: Gemini CLI with isolation chroot, as uid 1000. Root
// prepares the agent's root/ through the mount (node and its libraries,
// the bundle, busybox's sh, /tmp); the program is a script that execs
// node on the bundle. HOME is /home/agent inside (root/home/agent, made by
// and owned by the user, its settings written as the user), the answer is
// recorded, a second send resumes the same Gemini session, and a tool
// call (read_file) reads the jail's file, not the host's.
func TestCLIGeminiChroot(t *testing.T) {
	needCLI(t, geminiPackage)
	needCLI(t, busybox)
	base := cliSimulator(t)
	key := cliKey("gemini-chroot")
	files := cliDefinition(cliCases[2], base)
	files["isolation"] = "chroot\n"
	files["env"] = "TMPDIR=/tmp\n"
	files["program"] = "#!/bin/sh\nexec /usr/bin/node /gemini/bundle/gemini.js \"$@\"\n"
	s := newFuseServerWith(t, func(s *server) {
		s.env = append(s.env, "CTXFS_CLI_KEY="+key)
		s.define("cli", files)
	})
	root := s.mnt("home/1000/agent/cli/root")
	bash(t, "set -e; R="+root+"; mkdir -p $R/bin $R/usr/bin $R/lib/x86_64-linux-gnu $R/lib64 $R/tmp $R/gemini; chmod 1777 $R/tmp"+
		"; cp /usr/bin/node $R/usr/bin/; cp -L /lib64/ld-linux-x86-64.so.2 $R/lib64/"+
		"; for l in $(ldd /usr/bin/node | grep -o '/lib/x86_64-linux-gnu/[^ ]*'); do cp -L $l $R/lib/x86_64-linux-gnu/; done"+
		"; cp -r "+geminiPackage+"/bundle "+geminiPackage+"/package.json $R/gemini/; cp "+busybox+" $R/bin/; ln -s busybox $R/bin/sh")
	send := func(id, input string) []frame {
		frames, _, err := s.requestAsWithin(jailUser, "cli", fmt.Sprintf(`{"op":"send","id":%q,"session":"jail","input":%q}`, id, input), 3*time.Minute)
		if err != nil || len(frames) == 0 || frames[len(frames)-1]["status"] != "ok" {
			t.Fatalf("send %s: %v\n%v\nlog:\n%s", input, err, frames, s.logText())
		}
		return frames
	}
	send("j1", "ctxfs-remember for ctxfs jail")
	home := filepath.Join(s.store, "home/1000/agent/cli/root/home/agent")
	for _, p := range []string{home, home + "/.gemini/settings.json"} {
		st, err := os.Lstat(p)
		if err != nil || st.Sys().(*syscall.Stat_t).Uid != 1000 {
			t.Errorf("%s: %v, want it owned by uid 1000", p, err)
		}
	}
	meta := s.mnt("home/1000/agent/cli/session/jail/meta.json")
	id := readOr(meta)
	if !strings.Contains(id, `"cli_session"`) {
		t.Fatalf("meta.json: %s", id)
	}
	if f := send("j2", "ctxfs-recall for ctxfs jail"); !strings.Contains(fmt.Sprint(f), "The word was pelican.") {
		t.Errorf("resumed send in the jail: %v", f)
	}
	if again := readOr(meta); again != id {
		t.Errorf("meta.json changed from %s to %s", id, again)
	}
	// A tool call in the jail: Gemini's read_file of note.txt in its
	// cwd, the jail's /, reads the jail's file (the host's / has none).
	testkit.Must(t, os.WriteFile(filepath.Join(root, "note.txt"), []byte("the note says 42\n"), 0o644))
	if _, err := os.Stat("/note.txt"); err == nil {
		t.Fatal("the host has a /note.txt: the jail's could not be told from it")
	}
	frames, _, err := s.requestAsWithin(jailUser, "cli", `{"op":"send","id":"j-tool","session":"jailtool","input":"ctxfs-tool-gemini"}`, 3*time.Minute)
	if err != nil || !strings.Contains(frameTypes(frames), "tool_call,") || !strings.Contains(frameTypes(frames), "tool_result,") {
		t.Fatalf("tool call in the jail: %v %s\n%v", err, frameTypes(frames), frames)
	}
	for _, f := range frames {
		if f["type"] == "tool_result" && f["is_error"] != false {
			t.Errorf("read_file of the jail's note.txt failed: %v", f)
		}
	}
	// The user swaps the CLI's config directory for a symlink: the next
	// run fails, and nothing is written where the link points.
	elsewhere := t.TempDir()
	testkit.Must(t, os.Chown(elsewhere, 1000, 1000))
	if out, err := bashAs(t, jailUser, "cd "+root+"/home/agent && rm -r .gemini && ln -s "+elsewhere+" .gemini"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	frames, _, err = s.requestAsWithin(jailUser, "cli", `{"op":"send","id":"j3","session":"jail","input":"ctxfs-hello"}`, 3*time.Minute)
	if got := frameTypes(frames); err != nil || !strings.HasSuffix(got, "error ELOOP,done error") && !strings.HasSuffix(got, "error ENOTDIR,done error") {
		t.Errorf("a run with HOME/.gemini a symlink: %v %s", err, got)
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Errorf("the run wrote through the symlink: %v", ents)
	}
	checkSecretNowhere(t, s, key)
}

// TestCLITimeout: a CLI that outlasts the definition's timeout (a slow
// answer) is stopped as every program is: error ETIMEDOUT, done error,
// and the answer that would have come is not recorded.
func TestCLITimeout(t *testing.T) {
	base := cliSimulator(t)
	c := cliCases[0]
	bin := filepath.Join(cliNPM, ".bin", c.program)
	needCLI(t, bin)
	files := cliDefinition(c, base)
	files["program"] = "#!/bin/sh\nexec " + bin + " \"$@\"\n"
	files["timeout"] = "3\n"
	s := newFuseServerWith(t, func(s *server) {
		s.env = append(s.env, "CTXFS_CLI_KEY="+cliKey("timeout"))
		s.define("cli", files)
	})
	got := frameTypes(s.cliSend("slow", "t1", "ctxfs-slow for ctxfs timeout"))
	if !strings.HasSuffix(got, "error ETIMEDOUT,done error") {
		t.Errorf("a CLI past its timeout: %s", got)
	}
	if events := fileBytes(t, s.mnt("home/0/agent/cli/session/slow/events.jsonl")); strings.Contains(events, "too late") {
		t.Errorf("the late answer is recorded:\n%s", events)
	}
}
