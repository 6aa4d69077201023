package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// groupsProbe reports a run's groups and whether it can list and read its
// own session directory.
const groupsProbe = `#!/bin/sh
echo "groups: $(id -G)"
echo "ls: $(ls $CTX_SESSION_DIR 2>&1 | tr '\n' ' ')"
echo "input: $(grep -c probe-input $CTX_SESSION_DIR/messages.jsonl 2>&1)"
exit 0
`

// TestSharedRunHasTheSpaceGroup: a shared session's directory is the
// space's group's (drwxrws--- root:SPACE), and its caller, a member by a
// supplementary group, ran its program with its primary gid and no
// supplementary group: `ls $CTX_SESSION_DIR` was EACCES inside and
// outside a jail. A run in a shared space now has the space's group
// beside its caller's gid, and no other of the caller's groups; a private
// run has none.
func TestSharedRunHasTheSpaceGroup(t *testing.T) {
	s := newJailServer(t, groupsProbe, false)
	s.spaceAdd("team", 1234)
	bob := &cred{uid: 1002, gid: 1002, groups: []uint32{1234, 1235}}
	s.jailBusybox(t, bob.uid, "jailed")
	s.defineReady("plain", map[string]string{"abi": "text", "program": groupsProbe})
	run := func(agent, id, extra string) string {
		t.Helper()
		frames, raw, err := s.requestAs(bob, agent, fmt.Sprintf(`{"op":"send","id":%q,"session":"plan"%s,"input":"probe-input"}`, id, extra))
		if err != nil || len(frames) == 0 || frames[len(frames)-1]["status"] != "ok" {
			t.Fatalf("send %s to %s: %v\n%s\nlog:\n%s", id, agent, err, raw, lastLines(s.logText(), 20))
		}
		return deltaText(frames)
	}
	for _, agent := range []string{"jailed", "plain"} {
		text := run(agent, agent+"-s", `,"scope":"shared","space":"team"`)
		for _, w := range []string{"groups: 1002 1234\n", "input: 1\n"} {
			if !strings.Contains(text, w) {
				t.Errorf("%s's shared run: missing %q in:\n%s", agent, w, text)
			}
		}
		if !strings.Contains(text, "messages.jsonl") {
			t.Errorf("%s's shared run cannot list its session directory:\n%s", agent, text)
		}
		if text := run(agent, agent+"-p", ""); !strings.Contains(text, "groups: 1002\n") || !strings.Contains(text, "input: 1\n") {
			t.Errorf("%s's private run: want gid 1002 alone and its session read:\n%s", agent, text)
		}
	}
}

// TestSharedToolProcessHasTheSpaceGroup: a model run's built-in tools run
// in a tool process started as its program would be; in a shared space
// it too has the space's group, and no other of its caller's.
func TestSharedToolProcessHasTheSpaceGroup(t *testing.T) {
	p := newFakeProvider(t, scripted(openAICall("c1", "shell_exec", `{"command":"id -G; ls \"$CTX_SESSION_DIR\""}`), openAIReply("done")))
	s := newToolServer(t, p.URL+"/v1", map[string]string{"tools": "shell.exec\n", "perm": "x\n"})
	s.spaceAdd("team", 1234)
	bob := &cred{uid: 1002, gid: 1002, groups: []uint32{1234, 1235}}
	frames, raw, err := s.requestAsWithin(bob, "doer", `{"op":"send","id":"s1","session":"plan","scope":"shared","space":"team","input":"look"}`, 60*time.Second)
	if d := lastDone(frames); err != nil || d == nil || d["status"] != "ok" {
		t.Fatalf("send: %v\n%s", err, raw)
	}
	p.mu.Lock()
	body := p.bodies[len(p.bodies)-1]
	p.mu.Unlock()
	var exec map[string]any
	testkit.Must(t, json.Unmarshal([]byte(toolResults(body)["c1"]), &exec))
	if out, _ := exec["stdout"].(string); !strings.HasPrefix(out, "1002 1234\n") || !strings.Contains(out, "messages.jsonl") {
		t.Errorf("shell.exec in a shared session: want groups 1002 1234 and its session listed: %v", exec)
	}
}
