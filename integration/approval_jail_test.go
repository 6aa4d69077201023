package integration

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestApprovalFromAnotherPIDNamespace: an answer written to the session's
// ctl file by a process of the owner's uid in a PID namespace of its own
// (as a jailed run's program or tool is) is refused EACCES, whether the
// process that opened ctl writes it or, the opener gone, a child that
// kept its descriptor writes it (the check is of the writer, at its
// WRITE; an opener's pid that no longer reads is no proof of anything).
// Nothing is recorded, the call still waits, and the owner's answer from
// the host through the same ctl file is taken.
func TestApprovalFromAnotherPIDNamespace(t *testing.T) {
	p := newFakeProvider(t, scripted(openAICall("call_1", "shell_exec", `{"argv":["true"]}`), openAIReply("done")))
	s := newToolServer(t, p.URL+"/v1", map[string]string{"tools": "shell.exec\n", "perm": "x\n", "approval": "ask\n"})
	done := s.sendAsync(owner, "k", "go")
	run := s.pendingOf(owner, 1)[0]["run"].(string)
	ctl := s.mnt("home/1001/agent/doer/session/k/ctl")
	events := filepath.Join(s.sessionDir(1001, "doer", "k"), "events.jsonl")
	before := fileBytes(t, events)
	approve := fmt.Sprintf(`{"op":"approve","run":"%s","id":"call_1","decision":"allow_once"}`, run)
	// inPIDNamespace runs script as uid 1001 in a new PID namespace; its
	// output is what it read back from ctl.
	inPIDNamespace := func(script string) string {
		t.Helper()
		out, _ := runCmd(t, nil, []string{"CTL=" + ctl, "REQ=" + approve}, "unshare", "--pid", "--fork", "--kill-child",
			"setpriv", "--reuid", "1001", "--regid", "1001", "--clear-groups", "/bin/sh", "-c", script)
		return out
	}
	for what, script := range map[string]string{
		"the opener writes":                 `exec 3<>"$CTL"; printf '%s\n' "$REQ" >&3; cat <&3`,
		"the opener gone, its child writes": `(exec 3<>"$CTL"; (sleep 1; printf '%s\n' "$REQ" >&3; cat <&3) &); sleep 3`,
	} {
		if out := inPIDNamespace(script); !strings.Contains(out, `"code":"EACCES"`) || strings.Contains(out, "approval_result") {
			t.Errorf("%s, in another PID namespace: %q, want an EACCES frame", what, out)
		}
	}
	if after := fileBytes(t, events); after != before {
		t.Fatalf("refused answers wrote:\n%s", strings.TrimPrefix(after, before))
	}
	if calls := s.pendingOf(owner, 1); calls[0]["id"] != "call_1" {
		t.Fatalf("pending after the refusals: %v", calls)
	}
	out, err := bashAs(t, owner, fmt.Sprintf(`exec 3<>%q; printf '%%s\n' %q >&3; cat <&3`, ctl, strings.Replace(approve, "allow_once", "deny", 1)))
	if err != nil || !strings.Contains(out, `"type":"approval_result"`) {
		t.Fatalf("the owner's answer from the host: %v %q", err, out)
	}
	if d := lastDone(waitRunDone(t, done)); d == nil || d["status"] != "ok" {
		t.Fatalf("run after the answer: %v", d)
	}
}
