package integration

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/agent/cli"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestImportForUidReadsAsUid: root's `ctx agent import --uid 1001 DIR`
// walks and reads DIR with 1001's rights, not root's. Ann makes her
// ~/.claude a symlink to a directory only root can read (as root's own
// ~/.claude is): root's sessions there are not imported into her home
// (EACCES), and nothing of them is written.
func TestImportForUidReadsAsUid(t *testing.T) {
	s := newFuseServer(t)
	claude := readImportFile(t, cli.ClaudeCode, "tool.jsonl")
	rootHome := userHome(t, &cred{}, claude) // root's, 0700
	annHome := filepath.Join(t.TempDir(), "ann")
	openToAll(t, annHome)
	testkit.Must(t, os.MkdirAll(annHome, 0o755))
	testkit.Must(t, os.Symlink(filepath.Join(rootHome, ".claude"), filepath.Join(annHome, ".claude")))
	chownTree(t, annHome, importAnn)

	out, code := s.ctxImport(nil, rootHome, "coder", "--from", "claude-code", "--uid", "1001", filepath.Join(annHome, ".claude", "projects"))
	if code != 1 || !strings.Contains(out, "EACCES") {
		t.Errorf("root's import for 1001 of a directory 1001 cannot read: exit %d, want 1 and EACCES\n%s", code, out)
	}
	msgs := s.mnt("home/1001/agent/coder/session/" + claude.session.ID + "/messages.jsonl")
	if _, err := os.Stat(msgs); err == nil {
		t.Errorf("root's own session was imported into 1001's home (%s)", msgs)
	}
}

// TestImportForUidKeepsAsUid: the copy root makes for 1001 under her
// agent's HOME is made with her rights. She makes the project directory
// a symlink to a directory of root's: nothing is made or given to her
// there.
func TestImportForUidKeepsAsUid(t *testing.T) {
	s := newFuseServer(t)
	claude := readImportFile(t, cli.ClaudeCode, "tool.jsonl")
	home := userHome(t, importAnn, claude)
	decoy := filepath.Join(t.TempDir(), "decoy")
	openToAll(t, decoy)
	testkit.Must(t, os.Mkdir(decoy, 0o755))

	// Her first import makes the agent's root/; then she plants the link.
	other := readImportFile(t, cli.Codex, "tool.jsonl")
	if out, code := s.ctxImport(importAnn, userHome(t, importAnn, other), "coder", "--from", "codex"); code != 0 {
		t.Fatalf("her own import: exit %d\n%s", code, out)
	}
	projects := s.mnt("home/1001/agent/coder/root/home/agent/.claude/projects")
	if out, err := bashAs(t, importAnn, "mkdir -p "+projects+" && ln -s "+decoy+" "+projects+"/-tmp-cc-work"); err != nil {
		t.Fatalf("her symlink: %v\n%s", err, out)
	}
	out, code := s.ctxImport(nil, home, "coder", "--from", "claude-code", "--uid", "1001")
	t.Logf("root's import for 1001: exit %d\n%s", code, out)
	entries, err := os.ReadDir(decoy)
	testkit.Must(t, err)
	for _, e := range entries {
		st, _ := os.Lstat(filepath.Join(decoy, e.Name()))
		t.Errorf("root's import for 1001 made %s in root's directory %s through her symlink (owner %d)", e.Name(), decoy, st.Sys().(*syscall.Stat_t).Uid)
	}
	if code == 0 || !strings.Contains(out, "EACCES") {
		t.Errorf("root's import for 1001 through her symlink: exit %d, want 1 and EACCES for the copy\n%s", code, out)
	}
}
