package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/proto"
)

// These tests run the real CLIs (pinned in testdata/npm, installed by
// scripts/deps.sh) through each adapter's Invocation against
// @copilotkit/aimock (agent/provider's, serving testdata/fixtures), and
// map what they print with the adapter's Parser: what the engine will do,
// without the engine.

// testKey is the key handed to the CLIs; aimock takes any.
const testKey = "sk-ctxfs-cli-test-key"

var npmBin = filepath.Join("testdata", "npm", "node_modules", ".bin")

// need skips, or fails under CTXFS_REQUIRE_CLIS=1 (CI), when something the
// real runs need is not installed.
func need(t *testing.T, what string) {
	t.Helper()
	msg := what + "; scripts/deps.sh installs it (npm ci in agent/cli/testdata/npm and agent/provider/testdata/aimock)"
	if os.Getenv("CTXFS_REQUIRE_CLIS") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// program is the absolute path of a CLI's installed executable.
func program(t *testing.T, a Adapter) string {
	bin, err := filepath.Abs(filepath.Join(npmBin, a.Program()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		need(t, a.Program()+" is not installed")
	}
	if _, err := exec.LookPath("node"); err != nil {
		need(t, "node is not on PATH")
	}
	return bin
}

// cliUid is whom the tests run the CLIs as when they run as root: the
// server starts a CLI as the run's uid, never root, and a CLI that
// updates or patches itself must not be able to rewrite the install the
// tests and CI read (Claude Code's was found so on 2026-12-04, its
// version check having run as root with root's HOME).
const cliUid = 1000

// cliUser is the credential the CLIs run with: cliUid's as root, when
// every directory above the install lets others through; else nil (the
// tests' own user), said in the log.
func cliUser(t *testing.T, bin string) *syscall.Credential {
	if os.Geteuid() != 0 {
		return nil
	}
	if d := unsearchable(bin); d != "" {
		t.Logf("%s is not searchable by others: the CLIs run as root", d)
		return nil
	}
	return &syscall.Credential{Uid: cliUid, Gid: cliUid}
}

// unsearchable is the first directory above path that others cannot
// search, "" when there is none.
func unsearchable(path string) string {
	for d := filepath.Dir(path); ; d = filepath.Dir(d) {
		if st, err := os.Stat(d); err != nil || st.Mode().Perm()&0o001 == 0 {
			return d
		}
		if d == "/" {
			return ""
		}
	}
}

// handOver gives the directories dirs, and everything in them, to the
// user c (nil: nobody else), and lets others through the directories
// above each (t.TempDir makes its own 0700).
func handOver(t *testing.T, c *syscall.Credential, dirs ...string) {
	if c == nil {
		return
	}
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(path, int(c.Uid), int(c.Gid))
		})
		if err != nil {
			t.Fatal(err)
		}
		for d := filepath.Dir(dir); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// ownedBy fails when something under dir is not the user c's: what the
// CLI made there, it made as c (nil: nothing to check).
func ownedBy(t *testing.T, c *syscall.Credential, dir string) {
	t.Helper()
	if c == nil {
		return
	}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // a CLI's temporary file, gone since the listing
		}
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if uid := info.Sys().(*syscall.Stat_t).Uid; uid != c.Uid {
			t.Errorf("%s is uid %d's, not the CLI's user's (%d)", path, uid, c.Uid)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// simulator runs aimock on a free port with the CLI fixtures and returns
// its URL; it is killed when the test ends.
func simulator(t *testing.T) string {
	t.Helper()
	llmock, _ := filepath.Abs(filepath.Join("..", "provider", "testdata", "aimock", "node_modules", ".bin", "llmock"))
	fixtures, _ := filepath.Abs(filepath.Join("testdata", "fixtures", "fixtures.json"))
	if _, err := os.Stat(llmock); err != nil {
		need(t, "aimock is not installed")
	}
	return testkit.Aimock(t, llmock, fixtures)
}

// cliRun is one run's outcome.
type cliRun struct {
	frames  []*proto.Object
	session string
	status  string
	stderr  string
}

// summary is the run's frames as summarize writes them, one a line.
func (r cliRun) summary() string { return strings.Join(summarize(r.frames), "\n") }

// runCLI runs a CLI once, as the engine will: the Invocation's args, env
// and files in a fresh HOME, the key in KeyVar, the prompt on stdin, each
// stdout line through the parser, Finish at the exit.
func runCLI(t *testing.T, a Adapter, home, work string, o Options, prompt string) cliRun {
	t.Helper()
	inv, err := a.Invocation(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range inv.Files {
		path := filepath.Join(home, f.Path)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, f.Data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := program(t, a)
	user, tmp, tools := cliUser(t, bin), t.TempDir(), toolPath(t)
	handOver(t, user, home, work, tmp, tools)
	cmd := exec.CommandContext(ctx, bin, inv.Args...)
	cmd.Dir = work
	// TMPDIR: Gemini CLI writes an error report there at each API error.
	cmd.Env = append([]string{"PATH=" + filepath.Dir(bin) + ":" + tools, "HOME=" + home,
		"TMPDIR=" + tmp, inv.KeyVar + "=" + testKey}, inv.Env...)
	cmd.Stdin = strings.NewReader(prompt)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: user}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := a.NewParser()
	var r cliRun
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, MaxLineBytes)
	for sc.Scan() {
		r.frames = append(r.frames, p.Parse(sc.Bytes())...)
	}
	err = cmd.Wait()
	exit := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		exit = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	ownedBy(t, user, home)
	last, status := p.Finish(exit, tail(stderr.Bytes(), 4096))
	r.frames, r.session, r.status, r.stderr = append(r.frames, last...), p.SessionID(), status, stderr.String()
	for _, f := range r.frames {
		if bytes.Contains(f.Line(), []byte(testKey)) {
			t.Errorf("the key is in a frame: %s", f.Line())
		}
	}
	if strings.Contains(r.stderr, testKey) {
		t.Errorf("the key is in the CLI's stderr (the engine keeps it as log events): %s", r.stderr)
	}
	return r
}

// toolPath is a directory holding only the programs the CLIs and their
// tools use here: node (the Codex and Gemini CLI launchers), a shell and
// the commands of the fixtures (and id, which /etc/profile runs: Codex
// runs its tools in a login shell). Not npm: opencode runs npm when it finds
// it, which fetches from the registry and writes under HOME in the
// background, after opencode has exited.
func toolPath(t *testing.T) string {
	dir := t.TempDir()
	for _, name := range []string{"node", "bash", "sh", "cat", "ls", "env", "grep", "sed", "head", "tail", "rg", "id"} {
		if path, err := exec.LookPath(name); err == nil {
			if err := os.Symlink(path, filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// realCases are the options and prompts of each CLI's real runs.
var realCases = []struct {
	cli        string
	model      string
	v1         bool   // the base URL takes /v1 (Codex, opencode)
	unknown    string // a session id of the CLI's shape that does not exist
	tool, call string // the prompt of the tool fixture, and the summary of its call
	result     string
}{
	{ClaudeCode, "", false, "00000000-0000-4000-8000-000000000000", "ctxfs-tool-claude",
		`tool_call toolu_ctxfs1 Bash {"command":"cat note.txt","description":"Read the note"}`, "tool_result toolu_ctxfs1 Bash false the note says 42"},
	{Codex, "gpt-5.1-codex", true, "00000000-0000-4000-8000-000000000000", "ctxfs-tool-codex",
		`tool_call item_1 command_execution {"command":"/bin/bash -lc 'cat note.txt'"}`, "tool_result item_1 command_execution false the note says 42\n"},
	{Gemini, "gemini-2.5-flash", false, "00000000-0000-4000-8000-000000000000", "ctxfs-tool-gemini",
		`tool_call read_file__call_ctxfs3 read_file {"file_path":"note.txt"}`, "tool_result read_file__call_ctxfs3 read_file false "},
	{OpenCode, "anthropic/claude-sonnet-4-5", true, "ses_00000000000000000000000000", "ctxfs-tool-opencode",
		`tool_call toolu_ctxfs5 bash {"command":"cat note.txt","description":"Read the note"}`, "tool_result toolu_ctxfs5 bash false the note says 42\n"},
}

func TestRealCLIs(t *testing.T) {
	base := simulator(t)
	for _, c := range realCases {
		t.Run(c.cli, func(t *testing.T) {
			t.Parallel()
			a, _ := Lookup(c.cli)
			home, work := t.TempDir(), t.TempDir()
			if err := os.WriteFile(filepath.Join(work, "note.txt"), []byte("the note says 42\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			o := Options{Model: c.model, BaseURL: base}
			if c.v1 {
				o.BaseURL += "/v1"
			}
			checkVersion(t, a, o)

			remember, recall := "ctxfs-remember for "+c.cli, "ctxfs-recall for "+c.cli
			first := runCLI(t, a, home, work, o, remember)
			if first.status != "ok" || !ValidSessionID(first.session) || !strings.Contains(first.summary(), "message [text Noted: pelican.]") {
				t.Fatalf("first run: %s, session %q\n%s\nstderr: %s", first.status, first.session, first.summary(), first.stderr)
			}

			o.Resume = first.session
			resumed := runCLI(t, a, home, work, o, recall)
			if resumed.status != "ok" || resumed.session != first.session || !strings.Contains(resumed.summary(), "message [text The word was pelican.]") {
				t.Fatalf("resumed run: %s, session %q (first %q)\n%s\nstderr: %s", resumed.status, resumed.session, first.session, resumed.summary(), resumed.stderr)
			}
			earlierTurnSent(t, base, recall, remember)

			o.Resume = c.unknown
			lost := runCLI(t, a, home, work, o, "ctxfs-recall")
			if lost.status != "error" || !strings.Contains(lost.summary(), "error ENOENT") {
				t.Errorf("resuming an unknown session: %s\n%s\nstderr: %s", lost.status, lost.summary(), lost.stderr)
			}

			o.Resume = ""
			tool := runCLI(t, a, home, work, o, c.tool)
			if s := tool.summary(); tool.status != "ok" || !strings.Contains(s, c.call) || !strings.Contains(s, c.result) {
				t.Errorf("tool run: %s\n%s\nstderr: %s", tool.status, s, tool.stderr)
			}

			failed := runCLI(t, a, home, work, o, "ctxfs-bad-request")
			if failed.status != "error" || !strings.Contains(failed.summary(), "error EINVAL") {
				t.Errorf("a 400 from the API: %s\n%s\nstderr: %s", failed.status, failed.summary(), failed.stderr)
			}
			// HOME is under the agent's root/ in the store: the CLI
			// must not have written the key there.
			keyNowhereUnder(t, home)
			keyNowhereUnder(t, work)
		})
	}
}

// keyNowhereUnder fails when a file under dir holds testKey.
func keyNowhereUnder(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // a CLI's temporary file or directory, gone since the listing
		}
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(path)
		if err == nil && bytes.Contains(data, []byte(testKey)) {
			t.Errorf("the key is in %s", path)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkVersion checks the installed CLI is the version the mapping was
// written against. The CLI runs as runCLI runs it, in an environment of
// its own (a fresh HOME, the invocation's variables: Claude Code's
// autoupdater off), never with the test's (root's HOME): a CLI started
// with that may try to update the install it runs from.
func checkVersion(t *testing.T, a Adapter, o Options) {
	inv, err := a.Invocation(o)
	if err != nil {
		t.Fatal(err)
	}
	bin := program(t, a)
	user, home, tmp, tools := cliUser(t, bin), t.TempDir(), t.TempDir(), toolPath(t)
	handOver(t, user, home, tmp, tools)
	cmd := exec.Command(bin, "--version")
	cmd.Env = append([]string{"PATH=" + filepath.Dir(bin) + ":" + tools, "HOME=" + home, "TMPDIR=" + tmp}, inv.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: user}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s --version: %v", a.Program(), err)
	}
	if !strings.Contains(string(out), a.Version()) {
		t.Fatalf("%s --version says %q; the mapping is for %s", a.Program(), out, a.Version())
	}
}

// earlierTurnSent checks, in aimock's request journal, that the request
// that carried prompt also carried the earlier turn: the CLI
// resumed its conversation rather than starting a new one.
func earlierTurnSent(t *testing.T, base, prompt, earlier string) {
	t.Helper()
	resp, err := http.Get(base + "/__aimock/journal")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		t.Fatal(err)
	}
	// The journal is one JSON array of requests; the prompts name the
	// CLI, so that one CLI's requests are not taken for another's.
	var entries []json.RawMessage
	if err := json.Unmarshal(body, &entries); err != nil {
		t.Fatalf("aimock's journal: %v", err)
	}
	for _, entry := range entries {
		if bytes.Contains(entry, []byte(prompt)) && bytes.Contains(entry, []byte(earlier)) {
			return
		}
	}
	t.Errorf("no request to aimock carried both %q and the earlier %q", prompt, earlier)
}
