package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/agent/cli"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
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

// TestImportTerminalGetsNoControls: the names of the files an import
// reports are the user's (root's --uid import walks her directories);
// on a terminal their control characters are U+FFFD, as a model's text
// is (clienv.TerminalText): a directory named with OSC 52 does not write
// root's clipboard, on stdout (imported) or stderr (refused).
func TestImportTerminalGetsNoControls(t *testing.T) {
	s := newFuseServer(t)
	claude := readImportFile(t, cli.ClaudeCode, "tool.jsonl")
	home := userHome(t, importAnn, claude)
	projects := filepath.Join(home, ".claude", "projects")
	evil := filepath.Join(projects, "-tmp-\x1b]52;c;ZWNobyBwd25lZA==\x07\x1b[2J")
	testkit.Must(t, os.Rename(filepath.Join(projects, "-tmp-cc-work"), evil))
	bad := filepath.Join(evil, "0f19e0aa-0000-4000-8000-00000000cafe.jsonl")
	testkit.Must(t, os.WriteFile(bad, []byte("not json\n"), 0o600))
	chownTree(t, home, importAnn)

	shown, _ := ctxOnTerminal(t, s, nil, "agent", "import", "coder", "--from", "claude-code", "--uid", "1001", projects) // exit 1: a file refused
	if !strings.Contains(shown, "imported ") || !strings.Contains(shown, "EINVAL") {
		t.Errorf("the terminal lacks the import's lines: %q", shown)
	}
	if i := strings.IndexAny(shown, "\x1b\x07"); i >= 0 {
		t.Errorf("the terminal got a control character at %d: %q", i, shown)
	}
}

// TestImportRefusesFIFO: a session file that is not a regular file (a
// FIFO named, or swapped in for a file after the walk) is EINVAL at once:
// its open does not wait for a writer, and no writer can feed the import
// lines without end.
func TestImportRefusesFIFO(t *testing.T) {
	s := newFuseServer(t)
	home := filepath.Join(t.TempDir(), "home")
	openToAll(t, home)
	testkit.Must(t, os.Mkdir(home, 0o700))
	fifo := filepath.Join(home, "4bc00285-d2db-45dd-8cc8-3e3ba6199b24.jsonl")
	testkit.Must(t, syscall.Mkfifo(fifo, 0o600))
	chownTree(t, home, importAnn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctxBin, "agent", "import", "coder", "--from", "claude-code", "--uid", "1001", fifo)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/", "CTX_ROOT=" + s.root}
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the import of a FIFO waited for a writer (killed after 5 s): %s", out)
	}
	if code := exitCode(t, err); code != 1 || !strings.Contains(string(out), "EINVAL") {
		t.Errorf("the import of a FIFO: exit %d, want 1 and EINVAL\n%s", code, out)
	}
}

// TestImportProgressOnTerminal: an import of more files than
// clienv.ProgressAfter shows one updating line on a terminal's stderr
// ("ctx: import: file 1 of 301"), each imported line printed whole after
// it is cleared, and every file imported; on a pipe there is no such line.
func TestImportProgressOnTerminal(t *testing.T) {
	s := newFuseServer(t)
	claude := readImportFile(t, cli.ClaudeCode, "tool.jsonl")
	home := userHome(t, importAnn, claude)
	projects := filepath.Join(home, ".claude", "projects", "-tmp-cc-work")
	body := fileBytes(t, claude.path)
	const n = clienv.ProgressAfter + 1
	for i := 1; i < n; i++ { // the first is userHome's
		id := fmt.Sprintf("0f19e0aa-0000-4000-8000-%012d", i)
		testkit.Must(t, os.WriteFile(filepath.Join(projects, id+".jsonl"), []byte(strings.ReplaceAll(body, claude.session.ID, id)), 0o600))
	}
	chownTree(t, home, importAnn)

	shown, err := ctxOnTerminal(t, s, importAnn, "agent", "import", "coder", "--from", "claude-code", projects)
	if err != nil {
		t.Fatalf("import of %d files on a terminal: %v\n%q", n, err, shown)
	}
	if !strings.HasPrefix(shown, fmt.Sprintf("\rctx: import: file 1 of %d\r\x1b[K", n)) {
		t.Errorf("the terminal does not start with the progress line, cleared: %q", shown[:min(len(shown), 200)])
	}
	lines := strings.Split(regexp.MustCompile(`\rctx: import: file \d+ of \d+\r\x1b\[K`).ReplaceAllString(shown, ""), "\n")
	if got := len(lines) - 1; got != n || !strings.HasPrefix(lines[0], "imported ") || lines[n] != "" {
		t.Errorf("the terminal shows %d lines once the progress is taken out, want %d imported lines:\n%q", got, n, shown[:min(len(shown), 400)])
	}
	for _, l := range lines[:n] {
		if !strings.HasPrefix(l, "imported ") {
			t.Fatalf("a line that is not a whole imported line: %q", l)
		}
	}
	if out, errs, code := ctxSplitAs(t, s, importAnn, "agent", "session", "list", "coder"); code != 0 || strings.Count(out, "\n") < n || errs != "" {
		t.Errorf("ctx agent session list after the import: %d, %d lines, stderr %q", code, strings.Count(out, "\n"), errs)
	}
}
