package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/agent/cli"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestImportThenResume: a Claude Code session and a Codex session the
// CLIs wrote, each imported into the cli agent "cli", are resumed by the
// next send to that session: the CLI's own session (the imported file,
// kept under the agent's HOME) goes on, aimock sees the imported turn sent
// again, and cli_session and by-uuid stay the imported uuid. Claude
// Code's is the file it wrote in agent/cli's runs; Codex's is written here
// by the real Codex, run directly as a user would, configured as the
// agent configures it: a rollout names its model provider, and Codex
// resumes it only with that provider configured (README, "Limits").
func TestImportThenResume(t *testing.T) {
	t.Run("claude-code", func(t *testing.T) {
		t.Parallel()
		base := cliSimulator(t)
		importThenResume(t, cliCases[0], base, readImportFile(t, cli.ClaudeCode, "tool.jsonl"))
	})
	t.Run("codex", func(t *testing.T) {
		t.Parallel()
		base := cliSimulator(t)
		importThenResume(t, cliCases[1], base, codexRollout(t, cliCases[1], base))
	})
}

// codexRollout runs the real Codex once, directly, on the tool fixture,
// with the config.toml the agent's definition gives it, and returns the
// rollout it wrote.
func codexRollout(t *testing.T, c cliCase, base string) importFile {
	t.Helper()
	bin := filepath.Join(cliNPM, ".bin", c.program)
	needCLI(t, bin)
	home, work := t.TempDir(), t.TempDir()
	testkit.Must(t, os.WriteFile(filepath.Join(work, "note.txt"), []byte("the note says 42\n"), 0o644))
	a, err := cli.Lookup(cli.Codex)
	testkit.Must(t, err)
	inv, err := a.Invocation(cli.Options{Model: c.model, BaseURL: base + "/v1"})
	testkit.Must(t, err)
	for _, f := range inv.Files {
		testkit.Must(t, os.MkdirAll(filepath.Join(home, filepath.Dir(f.Path)), 0o700))
		testkit.Must(t, os.WriteFile(filepath.Join(home, f.Path), f.Data, 0o600))
	}
	cmd := exec.Command(bin, inv.Args...)
	cmd.Dir, cmd.Stdin = work, strings.NewReader(c.tool)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + home, inv.KeyVar + "=sk-fake"}, inv.Env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("codex: %v\n%s", err, out)
	}
	rollouts, _ := filepath.Glob(filepath.Join(home, ".codex", "sessions", "*", "*", "*", "rollout-*.jsonl"))
	if len(rollouts) != 1 {
		t.Fatalf("codex wrote %d rollouts: %v", len(rollouts), rollouts)
	}
	f, err := os.Open(rollouts[0])
	testkit.Must(t, err)
	defer f.Close()
	sess, err := cli.ReadSession(cli.Codex, f)
	testkit.Must(t, err)
	return importFile{from: cli.Codex, path: rollouts[0], session: sess}
}

func importThenResume(t *testing.T, c cliCase, base string, f importFile) {
	s := newCLIServer(t, c, base, cliKey("import"))
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
