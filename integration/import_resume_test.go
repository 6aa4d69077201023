package integration

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestImportThenResume: a Claude Code session the CLI wrote, imported
// into the cli agent "cli", is resumed by the next send to that session:
// the CLI's own session (the imported file, kept under the agent's HOME)
// goes on, aimock sees the imported turn sent again, and cli_session and
// by-uuid stay the imported uuid. (A Codex rollout names its model
// provider, and Codex resumes it only with that provider configured: the
// one the test file was written with is not the one an agent's endpoint
// configures; README, "Limits".)
func TestImportThenResume(t *testing.T) {
	importThenResume(t, cliCases[0]) // claude-code
}

func importThenResume(t *testing.T, c cliCase) {
	base := cliSimulator(t)
	s := newCLIServer(t, c, base, cliKey("import"))
	f := readImportFile(t, c.cli, "tool.jsonl")
	home := userHome(t, &cred{}, f)
	if out, code := s.ctxImport(nil, home, "cli", "--from", c.cli); code != 0 {
		t.Fatalf("import: exit %d\n%s", code, out)
	}
	id := f.session.ID
	recall := "ctxfs-recall after the import"
	frames := s.cliSend(id, "after-import", recall)
	if frames[len(frames)-1]["status"] != "ok" {
		t.Fatalf("the send to the imported session: %s\n%v\nlog:\n%s", frameTypes(frames), frames, s.logText())
	}
	if !journalHas(t, base, recall, c.tool) {
		t.Errorf("no request to aimock carried %q with the imported turn: the CLI did not resume the imported session", recall)
	}
	if got, _ := s.cliMeta(t, id)["cli_session"].(string); got != id {
		t.Errorf("cli_session after the send: %q, want the imported %s", got, id)
	}
	if got := s.readMnt("home/0/agent/cli/session/index/by-uuid/" + id); got != id+"\n" {
		t.Errorf("by-uuid/%s after the send: %q", id, got)
	}
	// The imported lines first, in order, then the run's.
	var roles []string
	for _, l := range strings.Split(strings.TrimSpace(s.readMnt("home/0/agent/cli/session/"+id+"/messages.jsonl")), "\n") {
		var m map[string]any
		testkit.Must(t, json.Unmarshal([]byte(l), &m))
		_, imported := m["imported"]
		roles = append(roles, m["role"].(string)+map[bool]string{true: "(imported)", false: ""}[imported])
	}
	if len(roles) <= len(f.session.Messages) || !strings.HasSuffix(roles[len(f.session.Messages)-1], "(imported)") || strings.HasSuffix(roles[len(f.session.Messages)], "(imported)") {
		t.Errorf("messages.jsonl after the send: %v", roles)
	}
}
