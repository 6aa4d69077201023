package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// Child runs (SPEC 18): a run starts runs of other agents of its home
// with agent.create (a model's built-in tool, a program's control
// socket); their status and result appear under the parent session's
// context/child/<run>/, at most 3 run at once, their authority is at most
// the parent's, and they end with a parent that is cancelled or lost.

// bossProgram is a program parent: each input line "AGENT INPUT" asks
// its control socket for agent.create and prints the reply; "hold" waits
// until $GATE exists; "socket" prints the socket's path.
const bossProgram = `#!/usr/bin/python3
import json, os, socket, sys, time
for i, line in enumerate(sys.stdin.read().splitlines()):
    if line == "hold":
        while not os.path.exists(os.environ["GATE"]):
            time.sleep(0.05)
        continue
    if line == "socket":
        with open(os.environ["GATE"] + ".sock", "w") as f:
            f.write(os.environ.get("CTX_CONTROL_SOCKET", "none"))
        continue
    agent, _, text = line.partition(" ")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(os.environ["CTX_CONTROL_SOCKET"])
    s.sendall((json.dumps({"op": "agent.create", "id": "k%d" % i, "agent": agent, "input": text}) + "\n").encode())
    reply = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        reply += d
    sys.stdout.write(reply.decode())
    sys.stdout.flush()
`

// slowProgram waits for $GATE, then answers "did INPUT", or fails for an
// input that starts with "fail".
const slowProgram = `#!/bin/sh
read x
while [ ! -e "$GATE" ]; do sleep 0.05; done
case "$x" in fail*) echo "failing"; exit 3;; esac
echo "did $x"
`

// gateDir is a directory every test uid can read, holding the file go
// that releases the programs waiting for it.
func gateDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "ctxfs-gate-")
	testkit.Must(t, err)
	testkit.Must(t, os.Chmod(d, 0o1777)) // a program may leave a note beside the gate
	t.Cleanup(func() { os.RemoveAll(d) })
	return filepath.Join(d, "go")
}

// defineReady defines an agent and waits for its socket.
func (s *server) defineReady(name string, files map[string]string) {
	s.t.Helper()
	s.define(name, files)
	eventually(s.t, 10*time.Second, name+"'s socket", func() bool {
		_, err := os.Stat(filepath.Join(s.root, "agent", name+".sock"))
		return err == nil
	})
}

// defineModel adds the model fake/NAME answered by the openai-chat API at
// endpoint.
func (s *server) defineModel(name, endpoint string) {
	d := filepath.Join(s.root, "model", "fake", name+".d")
	testkit.Must(s.t, os.MkdirAll(d, 0o755))
	for f, v := range map[string]string{"api": "openai-chat", "endpoint": endpoint, "model_id": name, "api_key_env": "FAKE_PROVIDER_KEY"} {
		testkit.Must(s.t, os.WriteFile(filepath.Join(d, f), []byte(v+"\n"), 0o644))
	}
}

// childDir is context/child/<run>/ of uid 1001's session of agent, through
// the mount.
func (s *server) childDir(agent, session, run string) string {
	return s.mnt(fmt.Sprintf("home/1001/agent/%s/session/%s/context/child/%s", agent, session, run))
}

// children lists the child runs context/child/ of a session shows.
func (s *server) children(agent, session string) []string {
	ents, _ := os.ReadDir(s.mnt(fmt.Sprintf("home/1001/agent/%s/session/%s/context/child", agent, session)))
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "ctx-") {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

// childFile reads a file of a child's directory ("" when missing).
func (s *server) childFile(agent, session, run, name string) string {
	b, _ := os.ReadFile(filepath.Join(s.childDir(agent, session, run), name))
	return string(b)
}

// waitChildStatus waits until a child's status file says want.
func (s *server) waitChildStatus(agent, session, run, want string) {
	s.t.Helper()
	eventually(s.t, 30*time.Second, run+" "+want, func() bool {
		return s.childFile(agent, session, run, "status") == want+"\n"
	})
}

// waitChildEnd waits until a child's status says it finished.
func (s *server) waitChildEnd(agent, session, run string) string {
	s.t.Helper()
	var st string
	eventually(s.t, 30*time.Second, run+" finished", func() bool {
		st = strings.TrimSpace(s.childFile(agent, session, run, "status"))
		return st == "done" || st == "error" || st == "cancelled"
	})
	return st
}

// createdChildren are the agent.created frames among a run's tool
// results, by call id.
func createdChildren(t *testing.T, events string) map[string]frame {
	out := map[string]frame{}
	for _, line := range strings.Split(events, "\n") {
		var f frame
		if json.Unmarshal([]byte(line), &f) != nil || f["type"] != "tool_result" {
			continue
		}
		var c frame
		if content, _ := f["content"].(string); json.Unmarshal([]byte(content), &c) == nil && c["type"] == "agent.created" {
			out[f["tool_call_id"].(string)] = c
		}
	}
	return out
}

// wait runs ctx agent wait as the owner and returns its output and code.
func (s *server) waitChild(agent, session, run string, extra ...string) (string, int) {
	s.t.Helper()
	out, errs, code := ctxSplitAs(s.t, s, owner, append([]string{"agent", "wait", agent, run, "--session", session}, extra...)...)
	return out + errs, code
}

// TestChildRunsFromModel: a model parent starts two children of different
// agents (an echo agent, and a program in a busybox jail); each gets its
// context/child/<run>/ files, done and result.md; the children's sessions
// name the parent in their start; their usage is added to the parent's;
// ctx agent wait prints status and result with exit 0; fsck is clean.
func TestChildRunsFromModel(t *testing.T) {
	var s *server
	// The parent's last turn waits for both children to end: their usage
	// is then added to the parent's run before its done.
	afterChildren := func(w http.ResponseWriter, r *http.Request) {
		eventually(t, 30*time.Second, "two children done", func() bool {
			kids := s.children("doer", "boss")
			return len(kids) == 2 && s.childFile("doer", "boss", kids[0], "status") == "done\n" && s.childFile("doer", "boss", kids[1], "status") == "done\n"
		})
		openAIReply("both started")(w, r)
	}
	p := newFakeProvider(t, scripted(
		openAICall("c1", "agent_create", `{"agent":"echoer","input":"hello child"}`),
		openAICall("c2", "agent_create", `{"agent":"jprog","input":"jail child","session":"jailwork"}`),
		afterChildren))
	s = newToolServer(t, p.URL+"/v1", map[string]string{"tools": "agent.create\nfs.read\n", "perm": "rx\n"})
	s.defineReady("echoer", map[string]string{"model": "debug/echo"})
	s.defineReady("jprog", map[string]string{"isolation": "chroot\n", "abi": "text\n", "program": "#!/bin/sh\nread x\necho \"jailed: $x\"\n"})
	s.jailBusybox(t, owner.uid, "jprog")

	frames := waitRunDone(t, s.sendAsync(owner, "boss", "start two children"))
	if d := lastDone(frames); d == nil || d["status"] != "ok" {
		t.Fatalf("parent: %v\nlog:\n%s", frames, s.logText())
	}
	parent := frames[0]["run"].(string)
	created := createdChildren(t, fileBytes(t, filepath.Join(s.sessionDir(1001, "doer", "boss"), "events.jsonl")))
	if len(created) != 2 || created["c1"]["agent"] != "echoer" || created["c2"]["session"] != "jailwork" {
		t.Fatalf("agent.created results: %v", created)
	}
	want := map[string]string{"c1": "hello child", "c2": "jailed: jail child\n"}
	for call, c := range created {
		run, agent, session := c["child"].(string), c["agent"].(string), c["session"].(string)
		s.waitChildStatus("doer", "boss", run, "done")
		if got := s.childFile("doer", "boss", run, "result.md"); got != want[call] {
			t.Errorf("%s result.md %q, want %q", agent, got, want[call])
		}
		if s.childFile("doer", "boss", run, "agent") != agent+"\n" || s.childFile("doer", "boss", run, "session") != session+"\n" {
			t.Errorf("%s: agent/session files wrong", run)
		}
		events := fileBytes(t, filepath.Join(s.sessionDir(1001, agent, session), "events.jsonl"))
		if !strings.Contains(events, `"type":"start","id":"`+run+`"`) || !strings.Contains(events, `"parent":"`+parent+`"`) {
			t.Errorf("%s's session does not name its parent:\n%s", agent, events)
		}
		out, code := s.waitChild("doer", "boss", run)
		if code != 0 || !strings.HasPrefix(out, "done\n"+strings.TrimSuffix(want[call], "\n")) {
			t.Errorf("ctx agent wait %s: %d %q", run, code, out)
		}
	}
	// The echo child's usage is added to the parent's run, under its
	// model (the program reports none); the children's files are the
	// user's.
	parentEvents := fileBytes(t, filepath.Join(s.sessionDir(1001, "doer", "boss"), "events.jsonl"))
	echoRun := created["c1"]["child"].(string)
	if !strings.Contains(parentEvents, `"type":"usage","run":"`+parent+`","child":"`+echoRun+`","agent":"echoer","model":"debug/echo","input_tokens":3,"output_tokens":3`) {
		t.Errorf("the parent's events lack the child's usage:\n%s", parentEvents)
	}
	if out, _, code := ctxSplitAs(t, s, owner, "agent", "usage", "doer", "--session", "boss", "--json"); code != 0 || !strings.Contains(out, `"model":"debug/echo"`) {
		t.Errorf("ctx agent usage of the parent: %d %s", code, out)
	}
	st, err := os.Stat(s.childDir("doer", "boss", created["c1"]["child"].(string)))
	testkit.Must(t, err)
	if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 1001 {
		t.Errorf("context/child/ owned by %d", sys.Uid)
	}
	// context/ is the owner's: a status the server never writes is an
	// error of wait --block, not a wait without end.
	status := s.childDir("doer", "boss", echoRun) + "/status"
	if out, err := bashAs(t, owner, "echo garbage > "+status); err != nil {
		t.Fatalf("writing the child's status: %v %s", err, out)
	}
	if out, code := s.waitChild("doer", "boss", echoRun, "--block"); code != 1 || !strings.Contains(out, `status "garbage" is none of pending, active`) {
		t.Errorf("ctx agent wait --block on a status the owner wrote: %d %q, want 1 naming it", code, out)
	}
	fsckClean(t, s)
}

// TestChildQueueWaitCancel: a program parent starts four children
// through its control socket; three run and the fourth waits (status file
// pending, phase queued in status); ctx agent wait exits 69 for an
// unfinished child, 130 for the queued one once cancelled, 0 for a done
// one and 1 for one that failed; --block waits for the end.
func TestChildQueueWaitCancel(t *testing.T) {
	requireFUSE(t)
	gate := gateDir(t)
	s := newServerWith(t, func(s *server) {
		s.define("boss", map[string]string{"abi": "text\n", "program": bossProgram, "env": "GATE=" + gate + "\n"})
		s.define("slow", map[string]string{"abi": "text\n", "program": slowProgram, "env": "GATE=" + gate + "\n"})
	})
	done := make(chan []frame, 1)
	go func() {
		frames, _, _ := s.requestAsWithin(owner, "boss", `{"op":"send","id":"b1","session":"fan","input":"slow a\nslow b\nslow fail-c\nslow d\nhold"}`, 60*time.Second)
		done <- frames
	}()
	var kids []string
	eventually(t, 30*time.Second, "four children", func() bool {
		kids = s.children("boss", "fan")
		return len(kids) == 4
	})
	statuses := func() map[string]string {
		m := map[string]string{}
		for _, k := range kids {
			m[strings.TrimSpace(s.childFile("boss", "fan", k, "status"))] += k + " "
		}
		return m
	}
	var queued string
	eventually(t, 30*time.Second, "three active, one pending", func() bool {
		m := statuses()
		queued = strings.TrimSpace(m["pending"])
		return len(strings.Fields(m["active"])) == 3 && len(strings.Fields(queued)) == 1
	})
	session := strings.TrimSpace(s.childFile("boss", "fan", queued, "session"))
	st := s.answerAsAgent(owner, "slow", fmt.Sprintf(`{"op":"status","session":%q}`, session))
	if runs, _ := st["runs"].([]any); len(runs) != 1 || runs[0].(map[string]any)["phase"] != "queued" {
		t.Fatalf("the fourth child's status: %v", st)
	}
	if out, code := s.waitChild("boss", "fan", queued); code != 69 || out != "pending\n" {
		t.Fatalf("wait on the queued child: %d %q", code, out)
	}
	blocked := make(chan int, 1)
	active := strings.Fields(statuses()["active"])[0]
	go func() { _, code := s.waitChild("boss", "fan", active, "--block"); blocked <- code }()

	if f := s.answerAsAgent(owner, "slow", fmt.Sprintf(`{"op":"cancel","id":%q}`, queued)); f["cancelled"] != true {
		t.Fatalf("cancel the queued child: %v", f)
	}
	s.waitChildStatus("boss", "fan", queued, "cancelled")
	if out, code := s.waitChild("boss", "fan", queued); code != 130 || !strings.HasPrefix(out, "cancelled\n") {
		t.Fatalf("wait on the cancelled child: %d %q", code, out)
	}
	testkit.Must(t, os.WriteFile(gate, nil, 0o644))
	select {
	case code := <-blocked:
		if code != 0 && code != 1 {
			t.Fatalf("wait --block: %d", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("wait --block did not return")
	}
	frames := waitRunDone(t, done)
	if d := lastDone(frames); d == nil || d["status"] != "ok" {
		t.Fatalf("parent: %v", frames)
	}
	results := map[string]int{}
	for _, k := range kids {
		if k == queued {
			continue
		}
		s.waitChildEnd("boss", "fan", k)
		_, code := s.waitChild("boss", "fan", k)
		results[strings.TrimSpace(s.childFile("boss", "fan", k, "result.md"))] = code
	}
	if results["did a"] != 0 || results["did b"] != 0 || results["failing"] != 1 {
		t.Fatalf("results and exit codes: %v", results)
	}
	fsckClean(t, s)
}

// answerAsAgent sends one line to an agent's socket as c and returns the
// one frame.
func (s *server) answerAsAgent(c *cred, agent, line string) frame {
	s.t.Helper()
	frames, raw, err := s.requestAs(c, agent, line)
	if err != nil || len(frames) != 1 {
		s.t.Fatalf("%s: %v %q", line, err, raw)
	}
	return frames[0]
}

// TestChildAttenuation: a child's tools are its own that its parent has
// too (a call of another is EACCES, not offered, and runs nothing); a
// jailed parent cannot start an unjailed child (EACCES, nothing started);
// another uid cannot use a run's control socket, nor root (not the run's
// process tree); a child cannot start children unless its definition
// says children allow.
func TestChildAttenuation(t *testing.T) {
	gate := gateDir(t)
	touched := filepath.Join(filepath.Dir(gate), "touched")
	child := newFakeProvider(t, scripted(
		openAICall("s1", "shell_exec", `{"command":"touch `+touched+`"}`),
		openAIReply("child ok")))
	jailed := newFakeProvider(t, scripted(
		openAICall("j1", "agent_create", `{"agent":"echoer","input":"escape"}`),
		openAIReply("refused")))
	p := newFakeProvider(t, scripted(
		openAICall("c1", "agent_create", `{"agent":"sub","input":"child task"}`),
		openAIReply("fine")))
	s := newToolServer(t, p.URL+"/v1", map[string]string{"tools": "agent.create\nfs.read\n", "perm": "rx\n"})
	s.defineModel("sub", child.URL+"/v1")
	s.defineModel("jail", jailed.URL+"/v1")
	s.defineReady("sub", map[string]string{"model": "fake/sub", "tools": "shell.exec\nfs.read\n", "perm": "rx\n"})
	s.defineReady("jdoer", map[string]string{"model": "fake/jail", "isolation": "chroot\n", "tools": "agent.create\n", "perm": "x\n"})
	s.defineReady("echoer", map[string]string{"model": "debug/echo"})
	for _, n := range []string{"boss", "kid", "kid2"} {
		s.defineReady(n, map[string]string{"abi": "text\n", "program": bossProgram, "env": "GATE=" + gate + "\n"})
	}
	s.define("kid2", map[string]string{"children": "allow\n"})

	// The model child is offered fs.read alone; its shell.exec is refused.
	frames := waitRunDone(t, s.sendAsync(owner, "boss", "start sub"))
	kids := s.children("doer", "boss")
	if len(kids) != 1 {
		t.Fatalf("children %v: %v", kids, frames)
	}
	s.waitChildStatus("doer", "boss", kids[0], "done")
	session := strings.TrimSpace(s.childFile("doer", "boss", kids[0], "session"))
	subEvents := fileBytes(t, filepath.Join(s.sessionDir(1001, "sub", session), "events.jsonl"))
	if !strings.Contains(subEvents, `"type":"tool_result"`) || !strings.Contains(subEvents, `not offered`) || !strings.Contains(subEvents, `"is_error":true`) {
		t.Errorf("the child's shell.exec was not refused:\n%s", subEvents)
	}
	if _, err := os.Stat(touched); err == nil {
		t.Errorf("the refused command ran")
	}
	child.mu.Lock()
	offered, _ := json.Marshal(child.bodies[0]["tools"])
	child.mu.Unlock()
	if !strings.Contains(string(offered), `"fs_read"`) || strings.Contains(string(offered), `"shell_exec"`) {
		t.Errorf("the child was offered %s", offered)
	}

	// A jailed parent's unjailed child: EACCES, nothing started.
	jframes, _, err := s.requestAsWithin(owner, "jdoer", `{"op":"send","id":"j","session":"jw","input":"try"}`, 60*time.Second)
	testkit.Must(t, err)
	if d := lastDone(jframes); d == nil || d["status"] != "ok" {
		t.Fatalf("jailed parent: %v\nlog:\n%s", jframes, s.logText())
	}
	jev := fileBytes(t, filepath.Join(s.sessionDir(1001, "jdoer", "jw"), "events.jsonl"))
	if !strings.Contains(jev, `"tool_call_id":"j1"`) || !strings.Contains(jev, "EACCES") || !strings.Contains(jev, "not isolated by chroot") {
		t.Errorf("jailed parent's events:\n%s", jev)
	}
	if _, err := os.Stat(filepath.Join(s.store, "home", "1001", "agent", "echoer")); err == nil {
		t.Errorf("the refused child left something of echoer")
	}
	if len(s.children("jdoer", "jw")) != 0 {
		t.Errorf("the refused child has files")
	}

	// Another uid, and root, cannot use the program's control socket.
	done := make(chan []frame, 1)
	go func() {
		f, _, _ := s.requestAsWithin(owner, "boss", `{"op":"send","id":"b1","session":"sock","input":"socket\nhold\nkid echoer from kid\nkid2 echoer from kid2"}`, 60*time.Second)
		done <- f
	}()
	var sock string
	eventually(t, 20*time.Second, "the socket's path", func() bool {
		b, _ := os.ReadFile(gate + ".sock")
		sock = string(b)
		return sock != ""
	})
	line := `{"op":"agent.create","id":"x1","agent":"echoer","input":"intruder"}`
	if out, err := runCmd(t, &cred{uid: 1002, gid: 1002}, nil, "/usr/bin/python3", "-c", sockRequest, sock, line); err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("uid 1002 on the control socket: %v %q", err, out)
	}
	if out, err := runCmd(t, nil, nil, "/usr/bin/python3", "-c", sockRequest, sock, line); err != nil || !strings.Contains(out, `"code":"EACCES"`) {
		t.Errorf("root on the control socket: %v %q", err, out)
	}
	if len(s.children("boss", "sock")) != 0 {
		t.Fatalf("a refused peer started a child")
	}
	testkit.Must(t, os.WriteFile(gate, nil, 0o644))
	if d := lastDone(waitRunDone(t, done)); d == nil || d["status"] != "ok" {
		t.Fatalf("boss did not end ok")
	}

	// kid may not start children; kid2 (children allow) may.
	results := map[string]string{}
	eventually(t, 30*time.Second, "kid and kid2 done", func() bool {
		for _, k := range s.children("boss", "sock") {
			if st := s.childFile("boss", "sock", k, "status"); st != "done\n" {
				return false
			}
			results[strings.TrimSpace(s.childFile("boss", "sock", k, "agent"))] = s.childFile("boss", "sock", k, "result.md")
		}
		return len(results) == 2
	})
	if !strings.Contains(results["kid"], `"code":"EACCES"`) || !strings.Contains(results["kid2"], `"type":"agent.created"`) {
		t.Errorf("grandchildren: %v", results)
	}
	fsckClean(t, s)
}

// startHeld sends "slow a", "slow b" and hold to boss's session and waits
// until both children are active; it returns the channel of the parent's
// frames and the children.
func startHeld(t *testing.T, s *server, session string) (<-chan []frame, []string) {
	done := make(chan []frame, 1)
	go func() {
		f, _, _ := s.requestAsWithin(owner, "boss", fmt.Sprintf(`{"op":"send","id":"b1","session":%q,"input":"slow a\nslow b\nhold"}`, session), 60*time.Second)
		done <- f
	}()
	var kids []string
	eventually(t, 30*time.Second, "two active children", func() bool {
		kids = s.children("boss", session)
		return len(kids) == 2 && s.childFile("boss", session, kids[0], "status") == "active\n" && s.childFile("boss", session, kids[1], "status") == "active\n"
	})
	return done, kids
}

func newBossServer(t *testing.T) *server {
	s, _ := newBossServerGate(t)
	return s
}

// newBossServerGate is newBossServer and the gate its programs wait for.
func newBossServerGate(t *testing.T) (*server, string) {
	requireFUSE(t)
	gate := gateDir(t)
	return newServerWith(t, func(s *server) {
		s.define("boss", map[string]string{"abi": "text\n", "program": bossProgram, "env": "GATE=" + gate + "\n"})
		s.define("slow", map[string]string{"abi": "text\n", "program": slowProgram, "env": "GATE=" + gate + "\n"})
	}), gate
}

// orphanChild sends boss's session a parent that starts one slow child
// (client id id, the child's input input) and ends ok, leaving the child
// running; it returns the child's run once its status is active.
func (s *server) orphanChild(session, id, input string) string {
	s.t.Helper()
	req := fmt.Sprintf(`{"op":"send","id":%q,"session":%q,"input":"slow %s"}`, id, session, input)
	frames, raw, err := s.requestAsWithin(owner, "boss", req, time.Minute)
	if d := lastDone(frames); err != nil || d == nil || d["status"] != "ok" {
		s.t.Fatalf("the parent that ends ok: %v %s", err, raw)
	}
	var kid string
	eventually(s.t, 30*time.Second, "its child active", func() bool {
		k := s.children("boss", session)
		if len(k) == 1 && s.childFile("boss", session, k[0], "status") == "active\n" {
			kid = k[0]
		}
		return kid != ""
	})
	return kid
}

// TestChildCancelParent: a parent cancelled cancels its owned children:
// agent.child.cancel in the parent's events and in each child's, each
// child done cancelled, its status file cancelled, ctx agent wait 130.
func TestChildCancelParent(t *testing.T) {
	s := newBossServer(t)
	done, kids := startHeld(t, s, "c")
	if f := s.answerAsAgent(owner, "boss", `{"op":"cancel","id":"b1","session":"c"}`); f["cancelled"] != true {
		t.Fatalf("cancel: %v", f)
	}
	if d := lastDone(waitRunDone(t, done)); d == nil || d["status"] != "cancelled" {
		t.Fatalf("the parent did not end cancelled")
	}
	parentEvents := fileBytes(t, filepath.Join(s.sessionDir(1001, "boss", "c"), "events.jsonl"))
	for _, k := range kids {
		s.waitChildStatus("boss", "c", k, "cancelled")
		if !strings.Contains(parentEvents, `"type":"agent.child.cancel"`) || !strings.Contains(parentEvents, `"child":"`+k+`"`) {
			t.Errorf("the parent's events lack the cancel of %s:\n%s", k, parentEvents)
		}
		ev := fileBytes(t, filepath.Join(s.sessionDir(1001, "slow", strings.TrimSpace(s.childFile("boss", "c", k, "session"))), "events.jsonl"))
		if !strings.Contains(ev, `"type":"agent.child.cancel","run":"`+k+`","reason":"the parent run`) || !strings.Contains(ev, `"type":"done","run":"`+k+`","status":"cancelled"`) {
			t.Errorf("child %s's events:\n%s", k, ev)
		}
		if _, code := s.waitChild("boss", "c", k); code != 130 {
			t.Errorf("wait %s: %d", k, code)
		}
	}
	fsckClean(t, s)
}

// TestChildKill9: the server killed with children running; at the
// restart every child's run is closed as interrupted, the parent's
// context/child/ status files say error and an interrupted parent's
// events say why (a parent that had ended ok: its files alone); fsck is
// clean.
func TestChildKill9(t *testing.T) {
	s := newBossServer(t)
	_, kids := startHeld(t, s, "k")
	// A parent that ended ok leaves its children running; at the restart
	// their own sessions' load marks them in its context/child/.
	orphan := s.orphanChild("ok", "b2", "c")
	s.restart(syscall.SIGKILL)
	// The programs died with the server (their runs are interrupted, and
	// nothing reads what they do).
	eventually(t, 10*time.Second, "no program of the killed server left", func() bool {
		return len(processesUnder(1001, s.root)) == 0
	})
	orphanSession := strings.TrimSpace(s.childFile("boss", "ok", orphan, "session"))
	s.answerAsAgent(owner, "slow", fmt.Sprintf(`{"op":"status","session":%q}`, orphanSession)) // loads it: the load closes its run
	s.waitChildStatus("boss", "ok", orphan, "error")
	parentEvents := fileBytes(t, filepath.Join(s.sessionDir(1001, "boss", "k"), "events.jsonl"))
	for _, k := range kids {
		s.waitChildStatus("boss", "k", k, "error")
		if !strings.Contains(parentEvents, `"type":"agent.child.cancel","run":`) || !strings.Contains(parentEvents, `"child":"`+k+`","reason":"interrupted`) {
			t.Errorf("the parent's events lack %s's end:\n%s", k, parentEvents)
		}
		ev := fileBytes(t, filepath.Join(s.sessionDir(1001, "slow", strings.TrimSpace(s.childFile("boss", "k", k, "session"))), "events.jsonl"))
		if !strings.Contains(ev, `"type":"done","run":"`+k+`","status":"error","interrupted":true`) {
			t.Errorf("child %s's events:\n%s", k, ev)
		}
		if _, code := s.waitChild("boss", "k", k); code != 1 {
			t.Errorf("wait %s: %d", k, code)
		}
	}
	fsckClean(t, s)
}

// TestChildWaitingReachesParent: a child's call that waits for approval
// is told to the parent's clients (agent.child.waiting, recorded in the
// parent's events first), listed by pending, and answered on the child's
// agent socket with the child's run id; the child then goes on.
func TestChildWaitingReachesParent(t *testing.T) {
	child := newFakeProvider(t, scripted(
		openAICall("w1", "shell_exec", `{"argv":["true"]}`),
		openAIReply("approved and ran")))
	var s *server
	afterChild := func(w http.ResponseWriter, r *http.Request) {
		eventually(t, 30*time.Second, "the child done", func() bool {
			kids := s.children("doer", "p")
			return len(kids) == 1 && s.childFile("doer", "p", kids[0], "status") == "done\n"
		})
		openAIReply("child finished")(w, r)
	}
	p := newFakeProvider(t, scripted(
		openAICall("c1", "agent_create", `{"agent":"asker","input":"run true"}`),
		afterChild))
	s = newToolServer(t, p.URL+"/v1", map[string]string{"tools": "agent.create\nshell.exec\n", "perm": "rx\n"})
	s.defineModel("ask", child.URL+"/v1")
	s.defineReady("asker", map[string]string{"model": "fake/ask", "tools": "shell.exec\n", "perm": "x\n", "approval": "ask\n"})
	done := s.sendAsync(owner, "p", "delegate")
	var call frame
	eventually(t, 30*time.Second, "the child's call pending", func() bool {
		frames, _, err := s.requestAs(owner, "asker", `{"op":"pending"}`)
		if err != nil || len(frames) != 2 {
			return false
		}
		call = frames[0]
		return true
	})
	kid := s.children("doer", "p")[0]
	if call["run"] != kid || call["id"] != "w1" {
		t.Fatalf("pending %v, child %s", call, kid)
	}
	res := s.answerAsAgent(owner, "asker", fmt.Sprintf(`{"op":"approve","run":%q,"id":"w1","decision":"allow_once"}`, kid))
	if res["type"] != "approval_result" {
		t.Fatalf("approve: %v", res)
	}
	frames := waitRunDone(t, done)
	var waiting frame
	for _, f := range frames {
		if f["type"] == "agent.child.waiting" {
			waiting = f
		}
	}
	if waiting == nil || waiting["child"] != kid || waiting["kind"] != "approval" || waiting["id"] != "w1" || waiting["name"] != "shell.exec" || waiting["agent"] != "asker" {
		t.Fatalf("the parent's stream: %v", frames)
	}
	ev := fileBytes(t, filepath.Join(s.sessionDir(1001, "doer", "p"), "events.jsonl"))
	if !strings.Contains(ev, `"type":"agent.child.waiting","run":"`+frames[0]["run"].(string)+`","child":"`+kid+`"`) {
		t.Errorf("the parent's events lack the waiting call:\n%s", ev)
	}
	if got := s.childFile("doer", "p", kid, "result.md"); got != "approved and ran" {
		t.Errorf("result.md %q", got)
	}
	fsckClean(t, s)
}

// TestChildCreateAsksApproval: under approval ask, agent.create (class x)
// waits for a person like shell.exec; denied, nothing is started.
func TestChildCreateAsksApproval(t *testing.T) {
	p := newFakeProvider(t, scripted(
		openAICall("c1", "agent_create", `{"agent":"echoer","input":"may I"}`),
		openAIReply("asked")))
	s := newToolServer(t, p.URL+"/v1", map[string]string{"tools": "agent.create\n", "perm": "x\n", "approval": "ask\n"})
	s.defineReady("echoer", map[string]string{"model": "debug/echo"})
	done := s.sendAsync(owner, "a", "delegate")
	call := s.pendingOf(owner, 1)[0]
	if call["name"] != "agent.create" || call["kind"] != "approval" {
		t.Fatalf("pending %v", call)
	}
	s.answerAs(owner, fmt.Sprintf(`{"op":"approve","run":%q,"id":"c1","decision":"deny"}`, call["run"]))
	if d := lastDone(waitRunDone(t, done)); d == nil || d["status"] != "ok" {
		t.Fatalf("the parent did not end ok")
	}
	if kids := s.children("doer", "a"); len(kids) != 0 {
		t.Fatalf("a denied create started %v", kids)
	}
	if _, err := os.Stat(filepath.Join(s.store, "home", "1001", "agent", "echoer")); err == nil {
		t.Fatalf("a denied create left a session of echoer")
	}
}

// childFixtures are aimock's answers for TestChildRunsAimock: one reply
// that starts two children, then, once the second's result comes back,
// the answer.
const childFixtures = `{"fixtures": [
  {"match": {"toolCallId": "call_k2"}, "response": {"content": "Both children started."}},
  {"match": {"userMessage": "ctxfs-children"}, "response": {"content": "Delegating.", "toolCalls": [
    {"id": "call_k1", "name": "agent_create", "arguments": {"agent": "echoer", "input": "echo from aimock"}},
    {"id": "call_k2", "name": "agent_create", "arguments": {"agent": "jprog", "input": "jail from aimock"}}
  ]}}
]}`

// TestChildRunsAimock: a model parent against aimock, a simulator
// written by others, in both APIs: one reply with two agent.create calls
// (an echo agent, a program in a busybox jail), both children done with
// their result.md.
func TestChildRunsAimock(t *testing.T) {
	if _, err := os.Stat(busybox); err != nil {
		t.Skipf("%s is missing", busybox)
	}
	fixtures := filepath.Join(t.TempDir(), "fixtures.json")
	testkit.Must(t, os.WriteFile(fixtures, []byte(childFixtures), 0o644))
	base := startAimockWith(t, fixtures)
	for _, c := range []struct{ api, endpoint string }{{"openai-chat", base + "/v1"}, {"anthropic-messages", base}} {
		t.Run(c.api, func(t *testing.T) {
			s := newModelServer(t, c.api, c.endpoint, nil)
			s.defineReady("doer", map[string]string{"model": "fake/llm", "tools": "agent.create\n", "perm": "x\n"})
			s.defineReady("echoer", map[string]string{"model": "debug/echo"})
			s.defineReady("jprog", map[string]string{"isolation": "chroot\n", "abi": "text\n", "program": "#!/bin/sh\nread x\necho \"jailed: $x\"\n"})
			s.jailBusybox(t, owner.uid, "jprog")
			frames := waitRunDone(t, s.sendAsync(owner, "a", "ctxfs-children"))
			if d := lastDone(frames); d == nil || d["status"] != "ok" || !strings.Contains(deltaText(frames), "Both children started.") {
				t.Fatalf("run: %v\nlog:\n%s", frames, s.logText())
			}
			results := map[string]string{}
			for _, k := range s.children("doer", "a") {
				s.waitChildStatus("doer", "a", k, "done")
				results[strings.TrimSpace(s.childFile("doer", "a", k, "agent"))] = s.childFile("doer", "a", k, "result.md")
			}
			if results["echoer"] != "echo from aimock" || results["jprog"] != "jailed: jail from aimock\n" {
				t.Fatalf("results %v", results)
			}
			fsckClean(t, s)
		})
	}
}

// TestChildFilesFollowNoLink: the user replaces a child's directory under
// context/child/ with a symlink to a directory of theirs while the child
// runs; the server's later writes follow no link: nothing lands in the
// link's target, and the moved directory is not written either.
func TestChildFilesFollowNoLink(t *testing.T) {
	s := newBossServer(t)
	done, kids := startHeld(t, s, "l")
	target := s.mnt("home/1001/agent/boss/root/target")
	dir := s.childDir("boss", "l", kids[0])
	if out, err := bashAs(t, owner, "mkdir -p "+target+" && mv "+dir+" "+dir+".moved && ln -s "+target+" "+dir); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	gate := strings.TrimPrefix(strings.TrimSpace(fileBytes(t, filepath.Join(s.root, "agent", "boss.d", "env"))), "GATE=")
	testkit.Must(t, os.WriteFile(gate, nil, 0o644))
	waitRunDone(t, done)
	s.waitChildStatus("boss", "l", kids[1], "done")
	session := strings.TrimSpace(fileBytes(t, dir+".moved/session"))
	eventually(t, 30*time.Second, "the child's run done", func() bool {
		return strings.Contains(fileBytes(t, filepath.Join(s.sessionDir(1001, "slow", session), "events.jsonl")), `"type":"done"`)
	})
	time.Sleep(200 * time.Millisecond) // the watcher's last writes come right after the done
	if ents, _ := os.ReadDir(target); len(ents) != 0 {
		t.Fatalf("the server wrote through the link: %v", ents)
	}
	if got := fileBytes(t, dir+".moved/status"); got != "active\n" {
		t.Fatalf("the moved directory was written: %q", got)
	}
	fsckClean(t, s)
}

// TestChildTemp: a child with life temp runs in a temp session (nothing
// of it in the store), and the parent's files show its end and result.
func TestChildTemp(t *testing.T) {
	p := newFakeProvider(t, scripted(
		openAICall("c1", "agent_create", `{"agent":"echoer","input":"kept nowhere","life":"temp"}`),
		openAIReply("ok")))
	s := newToolServer(t, p.URL+"/v1", map[string]string{"tools": "agent.create\n", "perm": "x\n"})
	s.defineReady("echoer", map[string]string{"model": "debug/echo"})
	if d := lastDone(waitRunDone(t, s.sendAsync(owner, "t", "go"))); d == nil || d["status"] != "ok" {
		t.Fatalf("the parent did not end ok")
	}
	kids := s.children("doer", "t")
	if len(kids) != 1 {
		t.Fatalf("children %v", kids)
	}
	s.waitChildStatus("doer", "t", kids[0], "done")
	if got := s.childFile("doer", "t", kids[0], "result.md"); got != "kept nowhere" {
		t.Fatalf("result.md %q", got)
	}
	if _, err := os.Stat(filepath.Join(s.store, "home", "1001", "agent", "echoer", "session")); err == nil {
		out, _ := exec.Command("find", filepath.Join(s.store, "home", "1001", "agent", "echoer")).CombinedOutput()
		t.Fatalf("a temp child left something in the store:\n%s", out)
	}
	fsckClean(t, s)
}

// processesUnder lists the pids of uid's processes whose command line
// names dir (a test's tree): what a test's runs started.
func processesUnder(uid int, dir string) []int {
	var pids []int
	for _, pid := range uidProcesses(uid) {
		if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.Contains(string(cmd), dir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// uidProcesses lists the pids of uid's processes.
func uidProcesses(uid int) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := os.Stat("/proc/" + e.Name()); err == nil && fileUID(st) == uid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestChildWaitingAtRestartEnds: a child whose call waits for approval
// when the server stops is not kept waiting: nothing follows it after the
// restart (its parent's context/child/ files, its parent's cancel), and
// it would go on with its own definition, not attenuated by its parent's
// (its own tools, approval auto). Its run is closed as interrupted, its
// status in the parent's context/child/ says error, and no call of it
// runs, asked or not.
func TestChildWaitingAtRestartEnds(t *testing.T) {
	out := t.TempDir()
	testkit.Must(t, os.Chmod(out, 0o777))
	first, second := filepath.Join(out, "first"), filepath.Join(out, "second")
	child := newFakeProvider(t, scripted(
		openAICall("w1", "shell_exec", `{"argv":["touch",`+jsonString(first)+`]}`),
		openAICall("w2", "shell_exec", `{"argv":["touch",`+jsonString(second)+`]}`),
		openAIReply("both ran")))
	p := newFakeProvider(t, scripted(
		openAICall("c1", "agent_create", `{"agent":"sub","input":"touch twice"}`),
		openAIReply("delegated")))
	s := newToolServer(t, p.URL+"/v1", map[string]string{"tools": "agent.create\nshell.exec\n", "perm": "rx\n", "approval": "ask\n"})
	s.defineModel("sub", child.URL+"/v1")
	s.defineReady("sub", map[string]string{"model": "fake/sub", "tools": "shell.exec\nfs.write\n", "perm": "rwx\n"})
	done := s.sendAsync(owner, "p", "delegate")
	create := s.pendingOf(owner, 1)[0]
	if create["name"] != "agent.create" {
		t.Fatalf("pending %v", create)
	}
	s.answerAs(owner, fmt.Sprintf(`{"op":"approve","run":%q,"id":"c1","decision":"allow_once"}`, create["run"]))
	if d := lastDone(waitRunDone(t, done)); d == nil || d["status"] != "ok" {
		t.Fatalf("the parent did not end ok")
	}
	kid := s.children("doer", "p")[0]
	eventually(t, 30*time.Second, "the child's first call pending", func() bool {
		frames, _, err := s.requestAs(owner, "sub", `{"op":"pending"}`)
		return err == nil && len(frames) == 2 && frames[0]["run"] == kid && frames[0]["id"] == "w1"
	})
	s.restart(syscall.SIGKILL)
	session := strings.TrimSpace(s.childFile("doer", "p", kid, "session"))
	frames, _, err := s.requestAs(owner, "sub", `{"op":"pending"}`)
	if err != nil || len(frames) != 1 {
		// The waiting child was kept: approving its first call resumes it.
		s.requestAs(owner, "sub", fmt.Sprintf(`{"op":"approve","run":%q,"id":"w1","decision":"allow_once"}`, kid))
		time.Sleep(3 * time.Second)
		_, err1 := os.Stat(first)
		_, err2 := os.Stat(second)
		t.Fatalf("the child still waits after the restart: %v; after its approval the first call ran: %v, the second, never asked: %v", frames, err1 == nil, err2 == nil)
	}
	s.answerAsAgent(owner, "sub", fmt.Sprintf(`{"op":"status","session":%q}`, session)) // loaded: its run closed
	s.waitChildStatus("doer", "p", kid, "error")
	ev := fileBytes(t, filepath.Join(s.sessionDir(1001, "sub", session), "events.jsonl"))
	if !strings.Contains(ev, `"type":"done","run":"`+kid+`","status":"error","interrupted":true`) {
		t.Errorf("the child's events:\n%s", ev)
	}
	for _, f := range []string{first, second} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s ran", f)
		}
	}
	fsckClean(t, s)
}

// TestChildCutWatcherStillCancelled: a child whose model streams one
// delta over the 1 MiB a reader may fall behind cuts its watcher's
// follow of it; the child still runs, shows active, and is cancelled with
// its parent (its command killed before it could finish).
func TestChildCutWatcherStillCancelled(t *testing.T) {
	out := t.TempDir()
	testkit.Must(t, os.Chmod(out, 0o777))
	finished := filepath.Join(out, "finished")
	big := strings.Repeat("thinking ", 140<<10) // 1.2 MiB in one delta
	childReply := func(w http.ResponseWriter, r *http.Request) {
		sse(w,
			`data: {"choices":[{"index":0,"delta":{"role":"assistant","content":`+jsonString(big)+`}}]}`,
			`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"s1","type":"function","function":{"name":"shell_exec","arguments":`+jsonString(`{"command":"sleep 6; touch `+finished+`"}`)+`}}]},"finish_reason":"tool_calls"}]}`,
			`data: {"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":9,"total_tokens":49}}`,
			`data: [DONE]`)
	}
	child := newFakeProvider(t, scripted(childReply, openAIReply("child done")))
	hold := func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() } // the parent waits until cancelled
	p := newFakeProvider(t, scripted(openAICall("c1", "agent_create", `{"agent":"sub","input":"think long"}`), hold))
	s := newToolServer(t, p.URL+"/v1", map[string]string{"tools": "agent.create\nshell.exec\n", "perm": "rx\n"})
	s.defineModel("sub", child.URL+"/v1")
	s.defineReady("sub", map[string]string{"model": "fake/sub", "tools": "shell.exec\n", "perm": "x\n", "window": "1000000\n"})
	done := make(chan []frame, 1)
	go func() {
		f, _, _ := s.requestAsWithin(owner, "doer", `{"op":"send","id":"par1","session":"p","input":"delegate"}`, 60*time.Second)
		done <- f
	}()
	var kid, session string
	eventually(t, 30*time.Second, "the child's command running", func() bool {
		kids := s.children("doer", "p")
		if len(kids) != 1 {
			return false
		}
		kid, session = kids[0], strings.TrimSpace(s.childFile("doer", "p", kids[0], "session"))
		return session != "" && strings.Contains(fileBytes(t, filepath.Join(s.sessionDir(1001, "sub", session), "events.jsonl")), `"type":"tool_call"`)
	})
	if st := s.childFile("doer", "p", kid, "status"); st != "active\n" {
		t.Errorf("the running child's status: %q", st)
	}
	if f := s.answerAsAgent(owner, "doer", `{"op":"cancel","id":"par1","session":"p"}`); f["cancelled"] != true {
		t.Fatalf("cancel: %v", f)
	}
	waitRunDone(t, done)
	ev := filepath.Join(s.sessionDir(1001, "sub", session), "events.jsonl")
	eventually(t, 30*time.Second, "the child's end", func() bool {
		return strings.Contains(fileBytes(t, ev), `"type":"done","run":"`+kid+`"`)
	})
	if e := fileBytes(t, ev); !strings.Contains(e, `"type":"done","run":"`+kid+`","status":"cancelled"`) {
		t.Errorf("the child was not cancelled with its parent:\n%s", lastLines(e, 3))
	}
	if _, err := os.Stat(finished); err == nil {
		t.Errorf("the child's command ran to its end after its parent's cancel")
	}
	s.waitChildStatus("doer", "p", kid, "cancelled")
}

// TestSharedParentStartsChild: a run in a shared space whose requester is
// a member by a supplementary group alone starts a child: the child's
// session is in the same space, and its files show it done.
func TestSharedParentStartsChild(t *testing.T) {
	alice := member(1001, 1234)
	p := newFakeProvider(t, scripted(
		openAICall("c1", "agent_create", `{"agent":"echoer","input":"from the space"}`),
		openAIReply("delegated")))
	s := newToolServer(t, p.URL+"/v1", map[string]string{"tools": "agent.create\n", "perm": "x\n"})
	s.defineReady("echoer", map[string]string{"model": "debug/echo"})
	s.spaceAdd("team", 1234)
	frames, raw, err := s.requestAsWithin(alice, "doer", `{"op":"send","id":"s1","session":"plan","scope":"shared","space":"team","input":"go"}`, 60*time.Second)
	if d := lastDone(frames); err != nil || d == nil || d["status"] != "ok" {
		t.Fatalf("the parent: %v %s", err, raw)
	}
	dir := filepath.Join(s.store, "shared", "team", "agent", "doer", "session", "plan")
	ev := fileBytes(t, filepath.Join(dir, "events.jsonl"))
	created := createdChildren(t, ev)["c1"]
	if created == nil {
		t.Fatalf("no child was created:\n%s", ev)
	}
	kid := created["child"].(string)
	status := filepath.Join(dir, "context", "child", kid, "status")
	eventually(t, 30*time.Second, "the child done", func() bool {
		b, _ := os.ReadFile(status)
		return string(b) == "done\n"
	})
	if _, err := os.Stat(filepath.Join(s.store, "shared", "team", "agent", "echoer", "session", created["session"].(string), "events.jsonl")); err != nil {
		t.Errorf("the child's session is not in the space: %v", err)
	}
	fsckClean(t, s)
}

// spawnerProgram is a program parent that starts, one after another, as
// many children of agent big in session kids as its input says (a
// create refused EAGAIN, the uid's runs all busy, is tried again), then
// writes $GATE.spawned and waits for $GATE.
const spawnerProgram = `#!/usr/bin/python3
import json, os, socket, sys, time
n, i = int(sys.stdin.read().strip()), 0
while i < n:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(os.environ["CTX_CONTROL_SOCKET"])
    s.sendall((json.dumps({"op": "agent.create", "id": "k%d" % i, "agent": "big", "input": "go", "session": "kids"}) + "\n").encode())
    reply = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        reply += d
    if b'"EAGAIN"' in reply:
        time.sleep(0.02)
        continue
    if b'"agent.created"' not in reply:
        sys.stdout.write(reply.decode())
        sys.exit(1)
    i += 1
    if i % 50 == 0:
        print("started", i, flush=True)  # the client hears from the run
open(os.environ["GATE"] + ".spawned", "w").close()
while not os.path.exists(os.environ["GATE"]):
    time.sleep(0.05)
print("spawned", n)
`

// TestFinishedChildrenLetGo: a parent that runs on keeps nothing in the
// server of the children that ended: each one's result (up to a
// message's 128 KiB) was held until the parent run ended, so a program
// parent with no timeout that started children one after another made
// the server hold 128 KiB more for each, without bound (800 children:
// about 200 MiB). Now the server grows by less than 60 MiB over them.
func TestFinishedChildrenLetGo(t *testing.T) {
	requireFUSE(t)
	gate := gateDir(t)
	const n = 800
	s := newServerWith(t, func(s *server) {
		s.define("spawner", map[string]string{"abi": "text\n", "program": spawnerProgram, "env": "GATE=" + gate + "\n"})
		s.define("big", map[string]string{"abi": "text\n", "program": "#!/bin/sh\nhead -c 130000 /dev/zero | tr '\\0' x\n"})
	})
	// One child first, so that what every child's run loads once is there.
	warm := s.sendAsyncTo(owner, "spawner", "w", "1", 60*time.Second)
	eventually(t, 60*time.Second, "the first child", func() bool { _, err := os.Stat(gate + ".spawned"); return err == nil })
	kids := s.children("spawner", "w")
	if len(kids) != 1 || s.waitChildEnd("spawner", "w", kids[0]) != "done" {
		t.Fatalf("the first child: %v", kids)
	}
	testkit.Must(t, os.WriteFile(gate, nil, 0o644))
	waitRunDone(t, warm)
	testkit.Must(t, os.Remove(gate))
	testkit.Must(t, os.Remove(gate+".spawned"))

	pid := s.cmd.Process.Pid
	base := vmKB(t, pid, "VmRSS")
	done := s.sendAsyncTo(owner, "spawner", "p", fmt.Sprint(n), 300*time.Second)
	eventually(t, 240*time.Second, "the children started", func() bool { _, err := os.Stat(gate + ".spawned"); return err == nil })
	kids = s.children("spawner", "p")
	if len(kids) != n {
		t.Fatalf("%d children, want %d", len(kids), n)
	}
	eventually(t, 60*time.Second, "every child ended", func() bool {
		return strings.TrimSpace(s.childFile("spawner", "p", kids[n-1], "status")) == "done"
	})
	grown := (vmKB(t, pid, "VmRSS") - base) / 1024
	testkit.Must(t, os.WriteFile(gate, nil, 0o644))
	if d := lastDone(waitRunDone(t, done)); d == nil || d["status"] != "ok" {
		t.Fatalf("the parent did not end ok")
	}
	t.Logf("the server grew by %d MiB over %d children of 130,000 bytes each", grown, n)
	if grown >= 60 {
		t.Fatalf("the server grew by %d MiB over %d finished children of a running parent: their results are still held", grown, n)
	}
}

// fakeChildren makes, as the session's owner, argv[2] directories in the
// context/child/ at argv[1] that look like children still running: a
// run id each, status active.
const fakeChildren = `
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(d, exist_ok=True)
for i in range(n):
    k = os.path.join(d, "ctx-%032x" % i)
    os.mkdir(k)
    with open(os.path.join(k, "status"), "w") as f:
        f.write("active\n")
print("made", n)
`

// TestInterruptedChildrenBounded: a parent's load after a restart closes
// at most 256 of the children its context/child/ shows running (no more
// can have run at once), however many directories its owner made there:
// each one it closed had its files written and one durable event of its
// own, so 3,000 made by uid 1001 beside a run kept active held the
// server's start (a clean restart as much as one after a crash) 7-9 s
// instead of 0.2-0.5 s, and a uid's inodes allow 100,000.
func TestInterruptedChildrenBounded(t *testing.T) {
	s := newBossServer(t)
	s.sendAsyncTo(owner, "boss", "k", "hold", 120*time.Second)
	eventually(t, 30*time.Second, "the held run", func() bool {
		b, _ := os.ReadFile(s.mnt("home/1001/agent/boss/session/k/state"))
		return strings.TrimSpace(string(b)) == "active"
	})
	if out, err := runCmd(t, owner, nil, "/usr/bin/python3", "-c", fakeChildren, s.mnt("home/1001/agent/boss/session/k/context/child"), "3000"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	started := time.Now()
	s.restart(syscall.SIGTERM)
	t.Logf("the restart took %v", time.Since(started))
	events := fileBytes(t, filepath.Join(s.sessionDir(1001, "boss", "k"), "events.jsonl"))
	if n := strings.Count(events, `"type":"agent.child.cancel"`); n != 256 {
		t.Fatalf("the parent's load closed %d children, want 256", n)
	}
	if !strings.Contains(events, `"status":"error","interrupted":true`) {
		t.Fatal("the parent's run was not closed as interrupted")
	}
}

// TestChildEndNotInRemadeParent: a parent that ended ok leaves its child
// running, whose end is written into the parent session's
// context/child/<run>/ by the session's path. The parent session archived
// and made again under its name while the child ran got the child's end:
// the new session showed a child it never started. A session whose
// children still run is not archived now (EBUSY, as one with a run of its
// own), nor offered by gc's preview (until 2026-12-05 its check left the
// children out: "archive p", then the archive's EBUSY, exit 1); once they
// end it is, with their ends in it.
func TestChildEndNotInRemadeParent(t *testing.T) {
	s, gate := newBossServerGate(t)
	kid := s.orphanChild("p", "b1", "a")
	childSession := strings.TrimSpace(s.childFile("boss", "p", kid, "session"))
	sessions := s.mnt("home/1001/agent/boss/session")
	if out, err := bashAs(t, owner, "mkdir "+sessions+"/other && echo other > "+sessions+"/index/current"); err != nil {
		t.Fatalf("another current session: %v %q", err, out)
	}
	if out, errs, code := ctxSplitAs(t, s, owner, "agent", "session", "gc", "boss", "--pattern", "p"); code != 0 || strings.Contains(out, "archive p") {
		t.Errorf("gc's preview of a session whose child runs: exit %d %q %q, want it passed over (EBUSY)", code, out, errs)
	}
	_, errs, code := ctxSplitAs(t, s, owner, "agent", "session", "archive", "boss", "p")
	if code == 0 {
		t.Errorf("archive of a session whose child runs: exit 0, want EBUSY")
		if out, err := bashAs(t, owner, "mkdir "+sessions+"/p"); err != nil {
			t.Fatalf("a new session p: %v %q", err, out)
		}
	} else if !strings.Contains(errs, "EBUSY") {
		t.Errorf("archive of a session whose child runs: exit %d %q, want EBUSY", code, errs)
	}
	testkit.Must(t, os.WriteFile(gate, nil, 0o644))
	eventually(t, 30*time.Second, "the child's own session done", func() bool {
		b, _ := os.ReadFile(filepath.Join(s.sessionDir(1001, "slow", childSession), "state"))
		return string(b) == "done\n"
	})
	if code == 0 {
		// The watcher writes its files just after the child's done.
		time.Sleep(2 * time.Second)
		if k := s.children("boss", "p"); len(k) != 0 {
			t.Fatalf("the new session p shows the old one's child: %v (status %q)", k, s.childFile("boss", "p", k[0], "status"))
		}
		return
	}
	s.waitChildStatus("boss", "p", kid, "done")
	if out, errs, code := ctxSplitAs(t, s, owner, "agent", "session", "archive", "boss", "p"); code != 0 {
		t.Fatalf("archive once the child ended: exit %d %s%s", code, out, errs)
	}
	archived := filepath.Join(s.store, "home/1001/archived_sessions/boss/p/context/child", kid)
	if st, res := fileBytes(t, filepath.Join(archived, "status")), fileBytes(t, filepath.Join(archived, "result.md")); st != "done\n" || res != "did a\n" {
		t.Errorf("the archived parent's child: status %q result %q", st, res)
	}
	fsckClean(t, s)
}

// TestWaitTerminalGetsNoControls: result.md is a child model's text;
// `ctx agent wait` shows it on a terminal with its control characters as
// U+FFFD, as `output` shows latest.md (clienv.TerminalText): an OSC 52 in
// it does not write the user's clipboard, a clear does not wipe the
// screen. A pipe gets the bytes as they are. (The file is written here
// through the mount by the session's owner, whose free tree context/ is.)
func TestWaitTerminalGetsNoControls(t *testing.T) {
	s := newFuseServer(t)
	s.sendAs(owner, "boss", "b1", "", "hello")
	const child = "ctx-0123456789abcdef0123456789abcdef"
	dir := s.mnt("home/1001/agent/coder/session/boss/context/child/" + child)
	result := "\x1b]52;c;ZWNobyBwd25lZA==\x07\x1b[2Jthe answer\n"
	if out, err := runCmd(t, owner, nil, "/bin/sh", "-c", `mkdir -p "$1" && printf 'done\n' >"$1/status" && printf '%s' "$2" >"$1/result.md"`, "sh", dir, result); err != nil {
		t.Fatalf("the child's files: %v %s", err, out)
	}
	args := []string{"agent", "wait", "coder", child, "--session", "boss"}
	shown, err := ctxOnTerminal(t, s, owner, args...)
	if err != nil || shown != "done\n\uFFFD]52;c;ZWNobyBwd25lZA==\uFFFD\uFFFD[2Jthe answer\n" {
		t.Errorf("wait on a terminal: %v, showed %q", err, shown)
	}
	if out, errs, code := ctxSplitAs(t, s, owner, args...); code != 0 || out != "done\n"+result || errs != "" {
		t.Errorf("wait in a pipe: exit %d stdout %q stderr %q", code, out, errs)
	}
}
