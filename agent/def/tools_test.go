package def

import (
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

func TestToolSettingsDefaults(t *testing.T) {
	root := t.TempDir()
	testkit.WriteFile(t, filepath.Join(root, "agent", "a.d", "model"), "debug/echo\n", 0o644)
	d, err := Load(root, abi.KindAgent, "a")
	if err != nil {
		t.Fatal(err)
	}
	if d.Tools != nil || d.Perm != "r" || d.Steps != 32 || d.Approval != ApprovalAuto || d.ApprovalTimeout != time.Hour {
		t.Errorf("defaults: tools %q perm %q steps %d approval %q timeout %s", d.Tools, d.Perm, d.Steps, d.Approval, d.ApprovalTimeout)
	}
	testkit.WriteFile(t, filepath.Join(root, "agent", "a.d", "tools"), "", 0o644)
	if d, err = Load(root, abi.KindAgent, "a"); err != nil || d.Tools != nil {
		t.Errorf("an empty tools file: %q, %v", d.Tools, err)
	}
}

func TestToolSettingsRead(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "agent", "a.d")
	testkit.WriteFile(t, filepath.Join(dir, "tools"), "shell.exec\nfs.read\nfs.write\nask_user\nfs.list\nfs.stat\nfs.replace\n", 0o644)
	testkit.WriteFile(t, filepath.Join(dir, "steps"), "5\n", 0o644)
	testkit.WriteFile(t, filepath.Join(dir, "approval"), "ask\n", 0o644)
	testkit.WriteFile(t, filepath.Join(dir, "approval_timeout"), "60\n", 0o644)
	for _, c := range []struct {
		perm string
		want []string
	}{
		{"", []string{"fs.read", "ask_user", "fs.list", "fs.stat"}}, // no perm file: r
		{"r", []string{"fs.read", "ask_user", "fs.list", "fs.stat"}},
		{"w", []string{"fs.write", "ask_user", "fs.replace"}},
		{"x", []string{"shell.exec", "ask_user"}},
		{"xwr", []string{"shell.exec", "fs.read", "fs.write", "ask_user", "fs.list", "fs.stat", "fs.replace"}},
	} {
		perm, want := c.perm, c.want
		if perm != "" {
			testkit.WriteFile(t, filepath.Join(dir, "perm"), perm+"\n", 0o644)
		}
		d, err := Load(root, abi.KindAgent, "a")
		if err != nil {
			t.Fatalf("perm %q: %v", perm, err)
		}
		if !reflect.DeepEqual(d.Tools, want) || d.Steps != 5 || d.Approval != ApprovalAsk || d.ApprovalTimeout != time.Minute {
			t.Errorf("perm %q: tools %q steps %d approval %q timeout %s", perm, d.Tools, d.Steps, d.Approval, d.ApprovalTimeout)
		}
	}
}

// A CLI agent's approval is read (its permission prompts follow it); a
// model's tool files are not consulted: a model has no tools.
func TestToolSettingsCLIAndModel(t *testing.T) {
	root := t.TempDir()
	testkit.WriteFile(t, filepath.Join(root, "agent", "cc"), "#!/bin/sh\n", 0o755)
	testkit.WriteFile(t, filepath.Join(root, "agent", "cc.d", "cli"), "claude-code\n", 0o644)
	testkit.WriteFile(t, filepath.Join(root, "agent", "cc.d", "approval"), "ask\n", 0o644)
	d, err := Load(root, abi.KindAgent, "cc")
	if err != nil || d.Approval != ApprovalAsk {
		t.Errorf("cli agent: approval %q, %v", d.Approval, err)
	}
	testkit.WriteFile(t, filepath.Join(root, "model", "p", "m.d", "tools"), "bogus\n", 0o644)
	if d, err = Load(root, abi.KindModel, "p/m"); err != nil || d.Tools != nil {
		t.Errorf("model: tools %q, %v", d.Tools, err)
	}
}

func TestToolSettingsInvalid(t *testing.T) {
	cases := []struct{ file, value string }{
		{"tools", "fs.read\nfs.delete\n"},
		{"tools", "fs.remove\n"}, // internal: never declared
		{"tools", "fs.read\nfs.read\n"},
		{"tools", " fs.read\n"},
		{"tools", "fs.read \n"},
		{"tools", "fs.read\r\n"},
		{"tools", "fs.read\n\nfs.list\n"},
		{"tools", "\n"},
		{"tools", "FS.READ\n"},
		{"tools", "fs_read\n"},
		{"perm", "rwxr\n"},
		{"perm", "rr\n"},
		{"perm", "a\n"},
		{"perm", "R\n"},
		{"perm", "\n"},
		{"perm", "r w\n"},
		{"steps", "0\n"},
		{"steps", "-1\n"},
		{"steps", "07\n"},
		{"steps", "1.5\n"},
		{"steps", "100001\n"},
		{"steps", "99999999999999999999\n"},
		{"steps", "\n"},
		{"approval", "yes\n"},
		{"approval", "ASK\n"},
		{"approval", "ask\nauto\n"},
		{"approval_timeout", "0\n"},
		{"approval_timeout", "-5\n"},
		{"approval_timeout", "1h\n"},
		{"approval_timeout", "31536001\n"},
	}
	refusedEach(t, cases)
}
