package def

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

func TestLoadAllControlFiles(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "agent", "coder.d")
	testkit.WriteFile(t, filepath.Join(root, "agent", "coder"), "#!/bin/sh\n", 0o755)
	testkit.WriteFile(t, filepath.Join(dir, "cwd"), "/workspace\n", 0o644)
	testkit.WriteFile(t, filepath.Join(dir, "model"), "openai/gpt-5\n", 0o644)
	testkit.WriteFile(t, filepath.Join(dir, "abi"), "text", 0o644)
	testkit.WriteFile(t, filepath.Join(dir, "env"), "# comment\nFOO=bar=baz\n\nEMPTY=\nPATH=/opt/bin\n", 0o644)
	testkit.WriteFile(t, filepath.Join(dir, "isolation"), "chroot\n", 0o644)
	testkit.WriteFile(t, filepath.Join(dir, "timeout"), "90\n", 0o644)
	testkit.WriteFile(t, filepath.Join(dir, "AGENTS.md"), "# Rules\nbe kind\n", 0o644)
	testkit.WriteFile(t, filepath.Join(dir, "window"), "50000\n", 0o644)
	testkit.WriteFile(t, filepath.Join(dir, "compact"), "auto\n", 0o644)
	testkit.WriteFile(t, filepath.Join(dir, "compact.strategy"), "summarize\n", 0o644)
	testkit.WriteFile(t, filepath.Join(dir, "skills", "b-review", "SKILL.md"), "---\nname: review\ndescription: \"Review: a diff\"\n---\nbody\n", 0o644)
	testkit.WriteFile(t, filepath.Join(dir, "skills", "a-plain", "SKILL.md"), "no front matter\n", 0o644)
	if err := os.MkdirAll(filepath.Join(dir, "skills", "c-empty"), 0o755); err != nil {
		t.Fatal(err)
	}

	d, err := Load(root, abi.KindAgent, "coder")
	if err != nil {
		t.Fatal(err)
	}
	want := &Definition{
		Kind: abi.KindAgent, Name: "coder", Dir: dir, Program: filepath.Join(root, "agent", "coder"),
		Cwd: "/workspace", Model: "openai/gpt-5", ABI: ABIText,
		Env:       []string{"FOO=bar=baz", "EMPTY=", "PATH=/opt/bin"},
		Isolation: IsolationChroot, Timeout: 90 * time.Second, AgentsMD: "# Rules\nbe kind\n",
		Perm: DefaultPerm, Steps: DefaultSteps, Approval: ApprovalAuto, ApprovalTimeout: DefaultApprovalTimeout,
		WindowDef: WindowDef{Window: 50000, Strategy: CompactSummarize},
		Skills: []Skill{
			{Name: "a-plain", Path: filepath.Join(dir, "skills", "a-plain", "SKILL.md")},
			{Name: "review", Description: "Review: a diff", Path: filepath.Join(dir, "skills", "b-review", "SKILL.md")},
		},
	}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("Load =\n%#v\nwant\n%#v", d, want)
	}
	if d.Echo() {
		t.Error("an agent with a program is not echo")
	}
}

func TestLoadDefaults(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "agent", "plain.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := Load(root, abi.KindAgent, "plain")
	if err != nil {
		t.Fatal(err)
	}
	if d.Program != "" || d.Model != EchoModel || d.ABI != ABIJSONL || d.Isolation != IsolationNone ||
		d.Timeout != 0 || d.Cwd != "" || d.Env != nil || d.AgentsMD != "" || d.Skills != nil || !d.Echo() {
		t.Errorf("defaults: %#v", d)
	}
}

func TestLoadInvalid(t *testing.T) {
	cases := []struct{ file, value string }{
		{"cwd", "relative\n"},
		{"cwd", "/a/../b\n"},
		{"cwd", "/a\n/b\n"},
		{"cwd", ""},
		{"model", "gpt\n"},
		{"model", "a/b/c\n"},
		{"abi", "xml\n"},
		{"abi", "\n"},
		{"isolation", "docker\n"},
		{"env", "NOEQUALS\n"},
		{"env", "1A=x\n"},
		{"env", "A-B=x\n"},
		{"env", "=x\n"},
		{"env", "CTX_RUN_ID=forged\n"},
		{"env", "A=1\nA=2\n"},
		{"timeout", "abc\n"},
		{"timeout", "-1\n"},
		{"timeout", "1.5\n"},
		{"timeout", "99999999999999999999\n"},
		{"timeout", "31536001\n"},
	}
	refusedEach(t, cases)
}

func TestLoadProgramNotExecutable(t *testing.T) {
	root := t.TempDir()
	testkit.WriteFile(t, filepath.Join(root, "agent", "a.d", "abi"), "jsonl\n", 0o644)
	testkit.WriteFile(t, filepath.Join(root, "agent", "a"), "#!/bin/sh\n", 0o644)
	_, err := Load(root, abi.KindAgent, "a")
	testkit.WantErrno(t, "non-executable program", err, syscall.EINVAL)
}

func TestLoadUndefinedAndNames(t *testing.T) {
	root := t.TempDir()
	// A program without its .d directory defines nothing.
	testkit.WriteFile(t, filepath.Join(root, "agent", "lonely"), "#!/bin/sh\n", 0o755)
	testkit.WriteFile(t, filepath.Join(root, "agent", "file.d"), "", 0o644)
	for _, c := range []struct {
		kind, name string
		want       syscall.Errno
	}{
		{abi.KindAgent, "nobody", syscall.ENOENT},
		{abi.KindAgent, "lonely", syscall.ENOENT},
		{abi.KindAgent, "file", syscall.ENOENT},
		{abi.KindModel, "p/m", syscall.ENOENT},
		{abi.KindAgent, "../x", syscall.EINVAL},
		{abi.KindAgent, "a.d", syscall.EINVAL},
		{abi.KindModel, "nomodel", syscall.EINVAL},
		{"robot", "a", syscall.EINVAL},
	} {
		_, err := Load(root, c.kind, c.name)
		testkit.WantErrno(t, c.kind+" "+c.name, err, c.want)
		// The server sends this to whoever asked: the name, never the
		// host path (it was "stat /…/agent/nobody.d: …").
		if c.want == syscall.ENOENT && (strings.Contains(err.Error(), root) || err.Error() != fmt.Sprintf("ENOENT: %s %q is not defined", c.kind, c.name)) {
			t.Errorf("%s %s: %q, want it named, and no path", c.kind, c.name, err)
		}
		if Defined(root, c.kind, c.name) {
			t.Errorf("%s %s: Defined", c.kind, c.name)
		}
	}
	if !Defined(root, abi.KindModel, EchoModel) {
		t.Errorf("the built-in %s is not Defined", EchoModel)
	}
}

// TestUndefinedSockets: sockets whose NAME.d is gone, agents' and models',
// valid names only; a defined one's socket and a file that is not a
// socket are not listed.
func TestUndefinedSockets(t *testing.T) {
	dir, err := os.MkdirTemp("", "ctxu") // short: socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	testkit.WriteFile(t, filepath.Join(dir, "agent", "here.d", "model"), "debug/echo\n", 0o644)
	testkit.WriteFile(t, filepath.Join(dir, "agent", "file.sock"), "", 0o644)
	// A provider that is a symlink is not looked into: its target may
	// be anywhere, and what is listed may be removed.
	if err := os.MkdirAll(filepath.Join(dir, "model"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "elsewhere"), filepath.Join(dir, "model", "linked")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"agent/here.sock", "agent/gone.sock", "agent/Bad Name.sock", "model/acme/old.sock", "model/debug/echo.sock", "elsewhere/other.sock"} {
		p = filepath.Join(dir, p)
		os.MkdirAll(filepath.Dir(p), 0o755)
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		l.SetUnlinkOnClose(false)
		l.Close()
	}
	want := []Socket{
		{abi.KindAgent, "gone", filepath.Join(dir, "agent/gone.sock")},
		{abi.KindModel, "acme/old", filepath.Join(dir, "model/acme/old.sock")},
	}
	if got := UndefinedSockets(dir); !reflect.DeepEqual(got, want) {
		t.Errorf("UndefinedSockets = %v, want %v", got, want)
	}
}

func TestLoadModels(t *testing.T) {
	root := t.TempDir()
	d, err := Load(root, abi.KindModel, EchoModel)
	if err != nil || !d.Echo() || d.Dir != "" || d.Model != EchoModel {
		t.Fatalf("built-in echo: %#v, %v", d, err)
	}
	testkit.WriteFile(t, filepath.Join(root, "model", "acme", "big"), "#!/bin/sh\n", 0o755)
	testkit.WriteFile(t, filepath.Join(root, "model", "acme", "big.d", "timeout"), "5\n", 0o644)
	d, err = Load(root, abi.KindModel, "acme/big")
	if err != nil {
		t.Fatal(err)
	}
	if d.Program != filepath.Join(root, "model", "acme", "big") || d.Model != "acme/big" || d.Timeout != 5*time.Second || d.Echo() {
		t.Errorf("model: %#v", d)
	}
}

func TestList(t *testing.T) {
	root := t.TempDir()
	agents, models, err := List(root)
	if err != nil || agents != nil || !reflect.DeepEqual(models, []string{EchoModel}) {
		t.Fatalf("empty root: %v %v %v", agents, models, err)
	}
	for _, d := range []string{"agent/zeta.d", "agent/alpha.d", "agent/bad name.d", "model/acme/big.d", "model/acme/small.d", "model/debug/echo.d", "model/zz/top.d"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WriteFile(t, filepath.Join(root, "agent", "alpha"), "#!/bin/sh\n", 0o755)
	testkit.WriteFile(t, filepath.Join(root, "agent", "notdir.d"), "", 0o644)
	agents, models, err = List(root)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(agents, []string{"alpha", "zeta"}) {
		t.Errorf("agents = %q", agents)
	}
	if !reflect.DeepEqual(models, []string{"acme/big", "acme/small", "debug/echo", "zz/top"}) {
		t.Errorf("models = %q", models)
	}
}

// refusedEach loads agent a with each control file holding its value,
// alone, and fails unless the load is EINVAL.
func refusedEach(t *testing.T, cases []struct{ file, value string }) {
	t.Helper()
	for _, c := range cases {
		root := t.TempDir()
		testkit.WriteFile(t, filepath.Join(root, "agent", "a.d", c.file), c.value, 0o644)
		_, err := Load(root, abi.KindAgent, "a")
		testkit.WantErrno(t, c.file+"="+c.value, err, syscall.EINVAL)
	}
}
