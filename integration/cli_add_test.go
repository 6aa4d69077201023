package integration

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// The tests of `ctx agent add NAME --cli CLI` and of ctx doctor's checks
// of CLI agents, with the pinned CLIs that scripts/deps.sh installs in
// agent/cli/testdata/npm.

// cliBinDir is node_modules/.bin of the pinned CLIs; it skips without
// them (fails under CTXFS_REQUIRE_CLIS=1, as CI sets).
func cliBinDir(t testing.TB) string {
	t.Helper()
	d, err := filepath.Abs(filepath.Join("..", "agent", "cli", "testdata", "npm", "node_modules", ".bin"))
	testkit.Must(t, err)
	if _, err := os.Stat(filepath.Join(d, "claude")); err != nil {
		if os.Getenv("CTXFS_REQUIRE_CLIS") == "1" {
			t.Fatalf("the coding-agent CLIs are not installed (scripts/deps.sh): %v", err)
		}
		t.Skipf("the coding-agent CLIs are not installed (scripts/deps.sh): %v", err)
	}
	return d
}

// ctxAdd runs `ctx agent add ARGS` as c (nil: root) with PATH and the
// root of s, and returns its output and exit status.
func ctxAdd(t *testing.T, s *server, c *cred, path string, args ...string) (string, int) {
	t.Helper()
	out, err := runCmd(t, c, []string{"CTX_ROOT=" + s.root, "PATH=" + path}, ctxBin, append([]string{"agent", "add"}, args...)...)
	return out, exitStatus(t, err)
}

// exitStatus is the exit status a runCmd error says, failing the test when
// the command did not run.
func exitStatus(t *testing.T, err error) int {
	t.Helper()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0
}

// agentDirSnapshot is hostSnapshot of the root's agent/ without atimes
// (the server reads the directory as it watches it).
func agentDirSnapshot(t *testing.T, s *server) map[string]string {
	return withoutAtimes(hostSnapshot(t, filepath.Join(s.root, "agent")))
}

// defFiles maps each file of a definition directory to its content.
func defFiles(t *testing.T, dir string) map[string]string {
	ents, err := os.ReadDir(dir)
	testkit.Must(t, err)
	files := map[string]string{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		testkit.Must(t, err)
		files[e.Name()] = string(b)
	}
	return files
}

// TestCLIAddDefinitions: for each CLI, `ctx agent add` finds its program
// in PATH, links agent/NAME to the real executable, writes NAME.d/ with
// cli and isolation (and the optional files), and the server takes the
// definition: its socket appears, and add says so.
func TestCLIAddDefinitions(t *testing.T) {
	bin := cliBinDir(t)
	s := newFuseServer(t)
	path := bin + ":/usr/local/bin:/usr/bin:/bin"
	for _, c := range []struct{ cli, program string }{
		{"claude-code", "claude"}, {"codex", "codex"}, {"gemini", "gemini"}, {"opencode", "opencode"},
	} {
		name := "cli-" + c.cli
		out, code := ctxAdd(t, s, nil, path, name, "--cli", c.cli)
		if code != 0 || !strings.Contains(out, "the server answers at "+filepath.Join(s.root, "agent", name+".sock")) {
			t.Fatalf("add %s: exit %d\n%s\nlog:\n%s", c.cli, code, out, s.logText())
		}
		real, err := filepath.EvalSymlinks(filepath.Join(bin, c.program))
		testkit.Must(t, err)
		if got, err := os.Readlink(filepath.Join(s.root, "agent", name)); err != nil || got != real {
			t.Errorf("agent/%s links to %q (%v), want %s", name, got, err, real)
		}
		want := map[string]string{"cli": c.cli + "\n", "isolation": "none\n"}
		if got := defFiles(t, filepath.Join(s.root, "agent", name+".d")); !maps.Equal(got, want) {
			t.Errorf("%s.d holds %v, want %v", name, got, want)
		}
	}
	out, code := ctxAdd(t, s, nil, "/usr/bin:/bin", "full", "--cli", "codex", "--path", filepath.Join(bin, "codex"),
		"--endpoint", "http://127.0.0.1:9/v1", "--model", "gpt-5.1-codex", "--api-key-file", "/etc/ctxfs/openai.key", "--isolation", "chroot")
	if code != 0 || !strings.Contains(out, "prepare-root.sh") {
		t.Fatalf("add full: exit %d\n%s", code, out)
	}
	want := map[string]string{"cli": "codex\n", "isolation": "chroot\n", "endpoint": "http://127.0.0.1:9/v1\n",
		"model_id": "gpt-5.1-codex\n", "api_key_file": "/etc/ctxfs/openai.key\n"}
	if got := defFiles(t, filepath.Join(s.root, "agent", "full.d")); !maps.Equal(got, want) {
		t.Errorf("full.d holds %v, want %v", got, want)
	}
	if !strings.Contains(out, "codex.js is a script run by /usr/bin/env node, which must then be in each uid's root/") {
		t.Errorf("add full: no note that codex.js needs node in the jail:\n%s", out)
	}
	exWaitSocket(t, s, "full")

	// --force replaces the whole definition at once.
	out, code = ctxAdd(t, s, nil, path, "full", "--cli", "gemini", "--force")
	want = map[string]string{"cli": "gemini\n", "isolation": "none\n"}
	if got := defFiles(t, filepath.Join(s.root, "agent", "full.d")); code != 0 || !maps.Equal(got, want) {
		t.Errorf("add --force: exit %d\n%s\nfull.d holds %v, want %v", code, out, got, want)
	}
	if ents, _ := filepath.Glob(filepath.Join(s.root, "agent", ".ctx-add.*")); len(ents) != 0 {
		t.Errorf("staged files left behind: %v", ents)
	}
}

// TestCLIAddRefusals: a bad name, an unknown CLI, a relative path, a bad
// endpoint or key variable are EINVAL (exit 2); a program not in PATH
// ENOENT, an existing agent EEXIST, a caller who is not root EACCES, an
// executable another user can replace EACCES (exit 1); each writes nothing
// in agent/.
func TestCLIAddRefusals(t *testing.T) {
	bin := cliBinDir(t)
	s := newFuseServer(t)
	path := bin + ":/usr/local/bin:/usr/bin:/bin"
	if out, code := ctxAdd(t, s, nil, path, "taken", "--cli", "claude-code"); code != 0 {
		t.Fatalf("add taken: exit %d\n%s", code, out)
	}
	exWaitSocket(t, s, "taken")
	open := filepath.Join(filepath.Dir(s.root), "open")
	testkit.Must(t, os.Mkdir(open, 0o777))
	testkit.Must(t, os.Chmod(open, 0o777))
	testkit.Must(t, os.WriteFile(filepath.Join(open, "claude"), []byte("#!/bin/sh\necho 9.9.9\n"), 0o755))
	for _, c := range []struct {
		what   string
		as     *cred
		path   string
		args   []string
		code   int
		prefix string
	}{
		{"bad name", nil, path, []string{"bad.d", "--cli", "codex"}, 2, "ctx: add: EINVAL: invalid agent name \"bad.d\""},
		{"unknown CLI", nil, path, []string{"x", "--cli", "vim"}, 2, "ctx: add: EINVAL: --cli \"vim\" is not a CLI"},
		{"no CLI", nil, path, []string{"x"}, 2, "ctx: add: EINVAL: --cli CLI is required"},
		{"relative path", nil, path, []string{"x", "--cli", "codex", "--path", "bin/codex"}, 2, "ctx: add: EINVAL: --path \"bin/codex\" is not an absolute path"},
		{"bad endpoint", nil, path, []string{"x", "--cli", "codex", "--endpoint", "file:///etc"}, 2, "ctx: add: EINVAL: --endpoint"},
		{"bad key variable", nil, path, []string{"x", "--cli", "codex", "--api-key-env", "A-B"}, 2, "ctx: add: EINVAL: --api-key-env"},
		{"both key sources", nil, path, []string{"x", "--cli", "codex", "--api-key-env", "K", "--api-key-file", "/k"}, 2, "ctx: add: EINVAL: --api-key-env and --api-key-file are exclusive"},
		{"bad isolation", nil, path, []string{"x", "--cli", "codex", "--isolation", "vm"}, 2, "ctx: add: EINVAL: --isolation"},
		{"not in PATH", nil, "/usr/bin:/bin", []string{"x", "--cli", "opencode"}, 1, "ctx: add: ENOENT: opencode: not found in PATH"},
		{"no such path", nil, path, []string{"x", "--cli", "codex", "--path", "/nonexistent/codex"}, 1, "ctx: add: ENOENT: /nonexistent/codex"},
		{"exists", nil, path, []string{"taken", "--cli", "codex"}, 1, "ctx: add: EEXIST: agent taken exists"},
		{"not root", &cred{uid: 1001, gid: 1001}, path, []string{"x", "--cli", "codex"}, 1, "ctx: add: EACCES: definitions are root's"},
		{"others can replace it", nil, open + ":/usr/bin:/bin", []string{"x", "--cli", "claude-code"}, 1, "ctx: add: EACCES: " + open + " can be changed by another user"},
	} {
		before := agentDirSnapshot(t, s)
		out, code := ctxAdd(t, s, c.as, c.path, c.args...)
		if code != c.code || !strings.HasPrefix(out, c.prefix) {
			t.Errorf("%s: exit %d, output %q; want exit %d and %q...", c.what, code, out, c.code, c.prefix)
		}
		testkit.Same(t, c.what+": agent/", before, agentDirSnapshot(t, s))
	}
}

// TestDoctorCLIVersions: ctx doctor names a CLI agent whose executable is
// missing, and one whose --version (a script that prints an old version)
// is older than its adapter's, each with the npm install that fixes it;
// each CLI agent added from the pinned packages is ok.
func TestDoctorCLIVersions(t *testing.T) {
	bin := cliBinDir(t)
	s := newFuseServerWith(t, func(s *server) {
		s.define("old", map[string]string{"program": "#!/bin/sh\necho '0.1.0 (Claude Code)'\n", "cli": "claude-code\n"})
		s.define("gone", map[string]string{"cli": "codex\n"})
		s.define("plain", map[string]string{"program": "#!/bin/sh\necho 0.0.1\n"})
	})
	testkit.Must(t, os.Symlink("/nonexistent/codex", filepath.Join(s.root, "agent", "gone")))
	for _, c := range []string{"claude-code", "codex", "gemini", "opencode"} {
		if out, code := ctxAdd(t, s, nil, bin+":/usr/bin:/bin", c, "--cli", c); code != 0 {
			t.Fatalf("add %s: exit %d\n%s", c, code, out)
		}
	}
	out, code := doctor(t, s, nil)
	if code != 1 {
		t.Errorf("doctor: exit %d, want 1\n%s", code, out)
	}
	old := filepath.Join(s.root, "agent", "old")
	wantFinding(t, "too old", out, "problem: cli agent old: "+old+" --version is 0.1.0, older than 2.1.332, the version ctxfs maps claude-code's stream for\n"+
		"  fix: upgrade it: npm install -g @anthropic-ai/claude-code@2.1.332, then ctx agent add old --cli claude-code --force")
	wantFinding(t, "missing", out, "problem: cli agent gone: its executable /nonexistent/codex is missing ("+filepath.Join(s.root, "agent", "gone")+" links to it)\n"+
		"  fix: npm install -g @openai/codex@0.171.0, then ctx agent add gone --cli codex --force")
	// What each pinned CLI prints (Codex a warning first) gives its version.
	for c, v := range map[string]string{"claude-code": "2.1.332", "codex": "0.171.0", "gemini": "0.61.0", "opencode": "1.18.33"} {
		wantFinding(t, c, out, fmt.Sprintf("ok: cli agent %s (%s %s, mapped for %s)", c, c, v, v))
	}
	if strings.Contains(out, "cli agent plain") {
		t.Errorf("an agent without a cli file is checked as a CLI:\n%s", out)
	}
}

// TestDoctorRunsNoReplaceableCLI: a CLI agent whose executable another
// user than root can change (hers, in her directory) is a problem ctx
// doctor names without running it: root's doctor ran its --version as
// root, so whoever could change the file ran what she liked as root.
func TestDoctorRunsNoReplaceableCLI(t *testing.T) {
	s := newFuseServer(t)
	dir := filepath.Join(t.TempDir(), "annbin")
	openToAll(t, dir)
	testkit.Must(t, os.Mkdir(dir, 0o755))
	marker := filepath.Join(dir, "ran-as")
	prog := filepath.Join(dir, "claude")
	testkit.Must(t, os.WriteFile(prog, []byte("#!/bin/sh\nid -u > "+marker+"\necho '2.1.332 (Claude Code)'\n"), 0o755))
	chownTree(t, dir, importAnn)
	s.define("hers", map[string]string{"cli": "claude-code\n"})
	testkit.Must(t, os.Symlink(prog, filepath.Join(s.root, "agent", "hers")))

	out, code := doctor(t, s, nil)
	if b, err := os.ReadFile(marker); err == nil {
		t.Errorf("root's ctx doctor ran her executable as uid %s", strings.TrimSpace(string(b)))
	}
	if code != 1 || !strings.Contains(out, "problem: cli agent hers: "+prog+" can be changed by another user than root") {
		t.Errorf("doctor: exit %d, want 1 and the executable named as changeable by another user\n%s", code, out)
	}
}
