package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	fsckClean(t, s)
}
