package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// newJailedToolServer is newToolServer with the agent "doer" in a chroot
// jail: busybox in uid 1001's root/bin, an /etc/shadow of the jail's own,
// and root/shadow a symlink to /etc/shadow, all made through the mount as
// the owner.
func newJailedToolServer(t *testing.T, endpoint string, files map[string]string) *server {
	t.Helper()
	if _, err := os.Stat(busybox); err != nil {
		t.Skipf("%s is missing", busybox)
	}
	files["isolation"] = "chroot\n"
	s := newToolServer(t, endpoint, files)
	root := s.mnt("home/1001/agent/doer/root")
	if out, err := bashAs(t, owner, `mkdir -p `+root+`/etc && echo "the jail's shadow" > `+root+`/etc/shadow && ln -s /etc/shadow `+root+`/shadow`); err != nil {
		t.Fatalf("preparing root/: %v %s", err, out)
	}
	s.jailBusybox(t, owner.uid, "doer")
	return s
}

// toolResults are the tool messages of a request the fake provider got,
// by call id.
func toolResults(body map[string]any) map[string]string {
	out := map[string]string{}
	msgs, _ := body["messages"].([]any)
	for _, m := range msgs {
		mm, _ := m.(map[string]any)
		if mm["role"] == "tool" {
			id, _ := mm["tool_call_id"].(string)
			out[id], _ = mm["content"].(string)
		}
	}
	return out
}

// TestModelToolsInJail: a model run with isolation chroot writes, reads
// and runs a command through its tools, each as the session's uid inside
// the jail: a root/ symlink to /etc/shadow reads the jail's file, never
// the host's; the calls and results are recorded (messages.jsonl,
// events.jsonl) and sent back to the provider in the next request, with
// the tools offered in every request.
func TestModelToolsInJail(t *testing.T) {
	p := newFakeProvider(t, scripted(
		openAICall("c1", "fs_write", `{"path":"notes.txt","content":"hello jail\n"}`),
		openAICall("c2", "fs_read", `{"path":"shadow"}`),
		openAICall("c3", "shell_exec", `{"command":"cat notes.txt; id -u; pwd; cat /etc/shadow ../../etc/shadow"}`),
		openAIReply("done")))
	s := newJailedToolServer(t, p.URL+"/v1", map[string]string{"tools": "fs.read\nfs.write\nshell.exec\n", "perm": "rwx\n"})
	hostShadow := fileBytes(t, "/etc/shadow")

	frames := waitRunDone(t, s.sendAsync(owner, "j", "use the tools"))
	if d := lastDone(frames); d == nil || d["status"] != "ok" {
		t.Fatalf("run: %v\nlog:\n%s", frames, s.logText())
	}
	if got := fileBytes(t, filepath.Join(s.store, "home", "1001", "agent", "doer", "root", "notes.txt")); got != "hello jail\n" {
		t.Errorf("notes.txt in root/: %q", got)
	}
	p.mu.Lock()
	bodies := append([]map[string]any(nil), p.bodies...)
	p.mu.Unlock()
	if len(bodies) != 4 {
		t.Fatalf("%d requests, want 4", len(bodies))
	}
	for i, b := range bodies {
		if tools, _ := b["tools"].([]any); len(tools) != 3 {
			t.Errorf("request %d offers %d tools", i+1, len(tools))
		}
	}
	results := toolResults(bodies[3])
	var read, exec map[string]any
	testkit.Must(t, json.Unmarshal([]byte(results["c2"]), &read))
	testkit.Must(t, json.Unmarshal([]byte(results["c3"]), &exec))
	if read["content"] != "the jail's shadow\n" {
		t.Errorf("fs.read of root/shadow (a symlink to /etc/shadow): %v", read)
	}
	if exec["stdout"] != "hello jail\n1001\n/\nthe jail's shadow\nthe jail's shadow\n" || exec["exit_status"] != 0.0 {
		t.Errorf("shell.exec in the jail: %v", exec)
	}
	for id, r := range results {
		if strings.Contains(r, "root:") || strings.Contains(hostShadow, r) && r != "" {
			t.Errorf("call %s reached the host's shadow: %s", id, r)
		}
	}
	msgs := fileBytes(t, filepath.Join(s.sessionDir(1001, "doer", "j"), "messages.jsonl"))
	events := fileBytes(t, filepath.Join(s.sessionDir(1001, "doer", "j"), "events.jsonl"))
	for _, want := range []string{`"role":"tool"`, `"tool_call_id":"c3"`, `"name":"shell.exec"`, `"type":"tool_call"`} {
		if !strings.Contains(msgs, want) {
			t.Errorf("messages.jsonl lacks %s", want)
		}
	}
	for _, want := range []string{`"type":"tool_call"`, `"type":"tool_result"`, `the jail's shadow`} {
		if !strings.Contains(events, want) {
			t.Errorf("events.jsonl lacks %s", want)
		}
	}
	waitGone(t, owner.uid, "after the run", func() []int { return s.runProcessesOf(owner.uid) }) // its tool process ended with it
	fsckClean(t, s)
}

// waitRunSleeps waits until the processes of s's runs as uid include n
// named sleep, and returns those.
func (s *server) waitRunSleeps(t *testing.T, uid uint32, n int) []int {
	t.Helper()
	var sleeps []int
	eventually(t, 20*time.Second, fmt.Sprintf("%d sleeps of uid %d's runs", n, uid), func() bool {
		sleeps = nil
		for _, pid := range s.runProcessesOf(uid) {
			if procField(pid, "Name") == "sleep" {
				sleeps = append(sleeps, pid)
			}
		}
		return len(sleeps) == n
	})
	return sleeps
}

// runProcessesOf lists the live processes of uid that descend from s's
// server: its runs' tool processes and what their commands started (the
// machine's other processes of the uid, other tests', are not counted).
func (s *server) runProcessesOf(uid uint32) []int {
	var out []int
	for _, pid := range hostPids() {
		if liveOf(pid, uid) && descendsFrom(pid, s.cmd.Process.Pid) {
			out = append(out, pid)
		}
	}
	return out
}

// liveOf reports whether pid runs (not a zombie) as uid.
func liveOf(pid int, uid uint32) bool {
	var st syscall.Stat_t
	state := procField(pid, "State")
	return syscall.Stat("/proc/"+strconv.Itoa(pid), &st) == nil && st.Uid == uid && state != "" && !strings.HasPrefix(state, "Z")
}

func descendsFrom(pid, ancestor int) bool {
	for i := 0; i < 64 && pid > 1; i++ {
		if pid = procParent(pid); pid == ancestor {
			return true
		}
	}
	return false
}

// waitGone waits until none of pids runs as uid, and fails (killing what
// is left) when one still does after 10 seconds.
func waitGone(t *testing.T, uid uint32, what string, pids func() []int) {
	t.Helper()
	left := func() []int {
		var out []int
		for _, pid := range pids() {
			if liveOf(pid, uid) {
				out = append(out, pid)
			}
		}
		return out
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(left()) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if l := left(); len(l) > 0 {
		for _, pid := range l {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		t.Errorf("%s: uid %d still has processes %v", what, uid, l)
	}
}

// TestModelToolsCancelledMidCall: a run cancelled while its shell.exec
// runs ends done cancelled, and leaves no process of the uid (its tool
// process, the command, what the command left in the background or in a
// session of its own), with and without a jail.
func TestModelToolsCancelledMidCall(t *testing.T) {
	for _, jailed := range []bool{false, true} {
		t.Run(fmt.Sprintf("jailed=%v", jailed), func(t *testing.T) {
			p := newFakeProvider(t, scripted(
				openAICall("c1", "shell_exec", `{"command":"sleep 300 & setsid sleep 300 & sleep 300"}`),
				openAIReply("never")))
			files := map[string]string{"tools": "shell.exec\n", "perm": "x\n"}
			var s *server
			if jailed {
				s = newJailedToolServer(t, p.URL+"/v1", files)
			} else {
				s = newToolServer(t, p.URL+"/v1", files)
			}
			done := make(chan []frame, 1)
			go func() {
				frames, _, _ := s.requestAsWithin(owner, "doer", `{"op":"send","id":"w1","session":"c","input":"sleep"}`, 60*time.Second)
				done <- frames
			}()
			var started []int // the tool process, the command and its sleeps
			eventually(t, 20*time.Second, "the command's three sleeps", func() bool {
				started = s.runProcessesOf(owner.uid)
				n := 0
				for _, pid := range started {
					if procField(pid, "Name") == "sleep" {
						n++
					}
				}
				return n == 3
			})
			if f, _, err := s.requestAs(owner, "doer", `{"op":"cancel","id":"w1"}`); err != nil || len(f) != 1 || f[0]["cancelled"] != true {
				t.Fatalf("cancel: %v %v", f, err)
			}
			if d := lastDone(waitRunDone(t, done)); d == nil || d["status"] != "cancelled" {
				t.Fatalf("the cancelled run: %v", d)
			}
			waitGone(t, owner.uid, "after the cancel", func() []int { return append(s.runProcessesOf(owner.uid), started...) })
		})
	}
}

// jailToolsFixtures are aimock's answers for TestModelToolsInJailAimock:
// one reply with three calls, then, once the last call's result comes
// back, the answer.
const jailToolsFixtures = `{"fixtures": [
  {"match": {"toolCallId": "call_j3"}, "response": {"content": "All done."}},
  {"match": {"userMessage": "ctxfs-jail-tools"}, "response": {"content": "Working.", "toolCalls": [
    {"id": "call_j1", "name": "fs_write", "arguments": {"path": "notes.txt", "content": "from aimock\n"}},
    {"id": "call_j2", "name": "fs_read", "arguments": {"path": "shadow"}},
    {"id": "call_j3", "name": "shell_exec", "arguments": {"command": "cat notes.txt; id -u; cat /etc/shadow"}}
  ]}}
]}`

// TestModelToolsInJailAimock: the same work against aimock, a simulator
// written by others, in both APIs: three calls in one reply, each run in
// the jail as uid 1001, their results sent back so that the simulator
// matches the second turn by the last call's id.
func TestModelToolsInJailAimock(t *testing.T) {
	fixtures := filepath.Join(t.TempDir(), "fixtures.json")
	testkit.Must(t, os.WriteFile(fixtures, []byte(jailToolsFixtures), 0o644))
	base := startAimockWith(t, fixtures)
	for _, c := range []struct{ api, endpoint string }{{"openai-chat", base + "/v1"}, {"anthropic-messages", base}} {
		t.Run(c.api, func(t *testing.T) {
			if _, err := os.Stat(busybox); err != nil {
				t.Skipf("%s is missing", busybox)
			}
			s := newModelServer(t, c.api, c.endpoint, nil)
			s.define("doer", map[string]string{"model": "fake/llm", "tools": "fs.read\nfs.write\nshell.exec\n", "perm": "rwx\n", "isolation": "chroot\n"})
			root := s.mnt("home/1001/agent/doer/root")
			if out, err := bashAs(t, owner, `mkdir -p `+root+`/etc && echo "the jail's shadow" > `+root+`/etc/shadow && ln -s /etc/shadow `+root+`/shadow`); err != nil {
				t.Fatalf("preparing root/: %v %s", err, out)
			}
			s.jailBusybox(t, owner.uid, "doer")
			frames := waitRunDone(t, s.sendAsync(owner, "a", "ctxfs-jail-tools"))
			if d := lastDone(frames); d == nil || d["status"] != "ok" || !strings.Contains(deltaText(frames), "All done.") {
				t.Fatalf("run: %v\nlog:\n%s", frames, s.logText())
			}
			if got := fileBytes(t, filepath.Join(s.store, "home", "1001", "agent", "doer", "root", "notes.txt")); got != "from aimock\n" {
				t.Errorf("notes.txt: %q", got)
			}
			events := fileBytes(t, filepath.Join(s.sessionDir(1001, "doer", "a"), "events.jsonl"))
			// A result is JSON text inside an event's JSON: its "\n" is "\\n" there.
			for _, want := range []string{`"tool_call_id":"call_j2"`, `"tool_call_id":"call_j3"`, `from aimock\\n1001\\nthe jail's shadow\\n`} {
				if !strings.Contains(events, want) {
					t.Errorf("events.jsonl lacks %s:\n%s", want, events)
				}
			}
			fsckClean(t, s)
		})
	}
}

// TestJailedToolCannotAnswer: a run's own tools see their session's ctl
// inside the jail, and must not answer what waits for a person there:
// while one run's question waits, another run's shell.exec in the same
// session writes an answer to ctl and is refused EACCES (it is in the
// jail's PID namespace); the question still waits, nothing is recorded,
// and the owner's answer from outside goes through.
func TestJailedToolCannotAnswer(t *testing.T) {
	forge := `R=$(grep -o '"type":"question","run":"[^"]*"' $CTX_SESSION_DIR/events.jsonl | head -1 | cut -d'"' -f8); ` +
		`exec 3<>$CTX_SESSION_DIR/ctl; printf '{"op":"answer","run":"%s","id":"q1","text":"forged"}\n' "$R" >&3 || echo WRITE-REFUSED; read -r line <&3; echo "$line"`
	args, _ := json.Marshal(map[string]string{"command": forge})
	p := newFakeProvider(t, scripted(
		openAICall("q1", "ask_user", `{"text":"may I?"}`),
		openAICall("c2", "shell_exec", string(args)),
		openAIReply("second done"),
		openAIReply("first done")))
	s := newJailedToolServer(t, p.URL+"/v1", map[string]string{"tools": "shell.exec\nask_user\n", "perm": "x\n"})
	first := s.sendAsync(owner, "shared-ctl", "ask me")
	run := s.pendingOf(owner, 1)[0]["run"].(string)
	second := waitRunDone(t, s.sendAsync(owner, "shared-ctl", "try to answer"))
	if d := lastDone(second); d == nil || d["status"] != "ok" {
		t.Fatalf("second run: %v", second)
	}
	var result string
	for _, f := range second {
		if f["type"] == "tool_result" {
			result, _ = f["content"].(string)
		}
	}
	if !strings.Contains(result, "WRITE-REFUSED") || !strings.Contains(result, "EACCES") {
		t.Fatalf("the jailed answer was not refused EACCES: %s", result)
	}
	if calls := s.pendingOf(owner, 1); calls[0]["run"] != run {
		t.Fatalf("pending %v", calls)
	}
	if ev := fileBytes(t, filepath.Join(s.sessionDir(1001, "doer", "shared-ctl"), "events.jsonl")); strings.Contains(ev, `"type":"answer"`) {
		t.Fatalf("a forged answer was recorded:\n%s", ev)
	}
	s.answerAs(owner, `{"op":"answer","run":"`+run+`","id":"q1","text":"yes"}`)
	if d := lastDone(waitRunDone(t, first)); d == nil || d["status"] != "ok" {
		t.Fatalf("first run: %v", d)
	}
}

// TestShellExecKeepsDescriptorLimit: a shell.exec command gets the soft
// descriptor limit a program gets, not the one the Go runtime raised for
// the tool process (near its hard limit), which a program sizing an
// fd_set or closing every descriptor up to its limit would trip over.
func TestShellExecKeepsDescriptorLimit(t *testing.T) {
	requireFUSE(t)
	p := newFakeProvider(t, scripted(openAICall("c1", "shell_exec", `{"command":"ulimit -Sn; ulimit -Hn"}`), openAIReply("done")))
	s := newServerWith(t, func(s *server) {
		s.wrap = []string{"prlimit", "--nofile=1024:20000", "--"}
		defineFakeModel(t, s, "openai-chat", p.URL+"/v1", nil)
		s.define("doer", map[string]string{"model": "fake/llm", "tools": "shell.exec\n", "perm": "x\n"})
		s.define("limits", map[string]string{"abi": "text", "program": "#!/bin/sh\nulimit -Sn; ulimit -Hn\n"})
	})
	if d := lastDone(waitRunDone(t, s.sendAsync(owner, "n", "ulimit"))); d == nil || d["status"] != "ok" {
		t.Fatalf("run: %v\nlog:\n%s", d, s.logText())
	}
	p.mu.Lock()
	body := p.bodies[len(p.bodies)-1]
	p.mu.Unlock()
	var exec map[string]any
	testkit.Must(t, json.Unmarshal([]byte(toolResults(body)["c1"]), &exec))
	if exec["stdout"] != "1024\n20000\n" {
		t.Errorf("shell.exec's descriptor limits (soft, hard): %q, want 1024 and 20000", exec["stdout"])
	}
	frames, _, err := s.requestAs(owner, "limits", `{"op":"send","id":"l1","session":"n","input":"x"}`)
	if err != nil || deltaText(frames) != "1024\n20000\n" {
		t.Errorf("a program's descriptor limits (soft, hard): %q %v", deltaText(frames), err)
	}
}

// TestStopKillsRunGroups: a clean stop of the server (SIGTERM) ends what
// its runs started in their process groups: an agent program's
// background child and a shell.exec command's, besides the program and
// the tool process that the parent-death signal reaches. Until
// 2026-12-05 both children went on as uid 1001, orphans of init.
func TestStopKillsRunGroups(t *testing.T) {
	p := newFakeProvider(t, scripted(openAICall("c1", "shell_exec", `{"command":"sleep 302 & sleep 303"}`), openAIReply("never")))
	s := newToolServer(t, p.URL+"/v1", map[string]string{"tools": "shell.exec\n", "perm": "x\n"})
	s.define("bg", map[string]string{"abi": "text", "program": "#!/bin/sh\nsleep 300 &\nsleep 301\n"})
	eventually(t, 10*time.Second, "the bg socket", func() bool {
		_, err := os.Stat(filepath.Join(s.root, "agent", "bg.sock"))
		return err == nil
	})
	go s.requestAsWithin(owner, "doer", `{"op":"send","id":"t1","session":"t","input":"sleep"}`, 30*time.Second)
	go s.requestAsWithin(owner, "bg", `{"op":"send","id":"b1","session":"b","input":"sleep"}`, 30*time.Second)
	sleeps := s.waitRunSleeps(t, owner.uid, 4)
	s.kill(s.cmd, syscall.SIGTERM)
	if s.cmd.ProcessState == nil || !s.cmd.ProcessState.Success() {
		t.Fatalf("the stop was not clean: %v\n%s", s.cmd.ProcessState, lastLines(s.logText(), 10))
	}
	waitGone(t, owner.uid, "after a clean stop", func() []int { return sleeps })
}
