package integration

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The single-file CLIs in a jail (isolation chroot), now that the jail
// has a /proc of its own: each is added with `ctx agent add --isolation
// chroot`, its root/ for uid 1000 made by examples/cli-agent/prepare-root.sh
// (libraries, certificates, busybox, tmp/, home/agent/, proc/), and run by
// the real server as uid 1000 against aimock: a text answer, then a send
// that resumes the CLI's session.

// codexNative is Codex's static (musl) binary inside its npm package: the
// program a chrooted Codex agent runs (its .bin/ entry is a node launcher).
var codexNative = filepath.Join(cliNPM, "@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex")

// TestCLICodexChroot: Codex in a jail (it stopped at once without /proc:
// "no /proc/self/exe available").
func TestCLICodexChroot(t *testing.T) {
	needCLI(t, codexNative)
	checkCLIChroot(t, cliCases[1], codexNative)
}

// TestCLIClaudeChroot: Claude Code in a jail (it stopped at once without
// /proc: "Can't access working directory /").
func TestCLIClaudeChroot(t *testing.T) {
	bin := filepath.Join(cliNPM, ".bin", "claude")
	needCLI(t, bin)
	checkCLIChroot(t, cliCases[0], bin)
}

// checkCLIChroot runs c's CLI, the executable exe, as a chrooted agent of
// uid 1000: a text answer, a resumed send, the key nowhere.
func checkCLIChroot(t *testing.T, c cliCase, exe string) {
	exRequireBusybox(t)
	base := cliSimulator(t)
	key := cliKey(c.cli + "-chroot")
	s := newFuseServerWith(t, func(s *server) { s.env = append(s.env, "CTXFS_CLI_KEY="+key) })
	endpoint := base
	if c.v1 {
		endpoint += "/v1"
	}
	args := []string{"cli", "--cli", c.cli, "--path", exe, "--endpoint", endpoint, "--api-key-env", "CTXFS_CLI_KEY", "--isolation", "chroot"}
	if c.model != "" {
		args = append(args, "--model", c.model)
	}
	if out, code := ctxAdd(t, s, nil, "/usr/bin:/bin", args...); code != 0 {
		t.Fatalf("ctx agent add: exit %d\n%s", code, out)
	}
	exMustScript(t, "cli-agent/prepare-root.sh", "--root", s.root, "--cli", c.cli, "1000", "cli")
	wantOwnerMode(t, s.mnt("home/1000/agent/cli/root/proc"), 1000, 0o555)
	send := func(id, input string) []frame {
		t.Helper()
		frames, raw, err := s.requestAsWithin(jailUser, "cli", fmt.Sprintf(`{"op":"send","id":%q,"session":"jail","input":%q}`, id, input), 3*time.Minute)
		if err != nil || len(frames) == 0 || frames[len(frames)-1]["status"] != "ok" {
			t.Fatalf("send %s: %v %s\n%v\nlog:\n%s", input, err, raw, frames, s.logText())
		}
		return frames
	}
	if f := send("c0", "ctxfs-hello"); !strings.Contains(fmt.Sprint(f), "Hello from aimock.") {
		t.Errorf("a text answer in the jail: %s\n%v", frameTypes(f), f)
	}
	remember, recall := "ctxfs-remember for ctxfs jailed "+c.cli, "ctxfs-recall for ctxfs jailed "+c.cli
	send("c1", remember)
	meta := s.mnt("home/1000/agent/cli/session/jail/meta.json")
	id := readOr(meta)
	if !strings.Contains(id, `"cli_session"`) {
		t.Fatalf("meta.json: %s", id)
	}
	if f := send("c2", recall); !strings.Contains(fmt.Sprint(f), "The word was pelican.") {
		t.Errorf("the resumed send in the jail: %v", f)
	}
	if again := readOr(meta); again != id {
		t.Errorf("meta.json changed from %s to %s", id, again)
	}
	if !journalHas(t, base, recall, remember) {
		t.Errorf("no request to aimock carried %q with the earlier %q: the CLI did not resume", recall, remember)
	}
	checkSecretNowhere(t, s, key)
}
