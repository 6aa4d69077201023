package abi

import (
	"strings"
	"syscall"
	"testing"
)

func TestValidIndexKey(t *testing.T) {
	cases := []struct {
		kind, key string
		ok        bool
	}{
		{IndexByCwd, CwdKey("/w"), true},
		{IndexByCwd, "cwd-XYZ", false},
		{IndexByHash, "abc.1", true},
		{IndexByHash, "../x", false},
		{IndexByUUID, "123e4567-e89b-12d3-a456-426614174000", true},
		{IndexByUUID, "abc", false},
		{"by-other", "abc", false},
	}
	for _, c := range cases {
		if got := ValidIndexKey(c.kind, c.key); got != c.ok {
			t.Errorf("ValidIndexKey(%q, %q) = %v", c.kind, c.key, got)
		}
	}
}

func TestPathsUnderRoot(t *testing.T) {
	if got := SocketPath("/ctx", KindAgent, "coder"); got != "/ctx/agent/coder.sock" {
		t.Errorf("agent socket %s", got)
	}
	if got := SocketPath("/ctx", KindModel, "openai/gpt-4"); got != "/ctx/model/openai/gpt-4.sock" {
		t.Errorf("model socket %s", got)
	}
	if got := DefinitionPath("/r", KindModel, "p/m") + ".d"; got != "/r/model/p/m.d" {
		t.Errorf("model definition %s", got)
	}
	env := map[string]string{}
	if RootFromEnv(func(k string) string { return env[k] }) != DefaultRoot {
		t.Error("default root")
	}
	env["CTX_ROOT"] = "/elsewhere"
	if RootFromEnv(func(k string) string { return env[k] }) != "/elsewhere" {
		t.Error("CTX_ROOT ignored")
	}
}

func TestErrnoNames(t *testing.T) {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.EAGAIN, syscall.ENOSPC, syscall.EFBIG, syscall.ENOTCONN} {
		n := ErrnoName(e)
		if n == "" || n[0] != 'E' || strings.ContainsAny(n[1:], "0123456789") && n != "E2BIG" {
			t.Errorf("ErrnoName(%d) = %q, not a name", e, n)
		}
		if back, ok := ErrnoFromName(n); !ok || back != e {
			t.Errorf("ErrnoFromName(%q) = %v %v, want %v", n, back, ok, e)
		}
	}
	if ErrnoName(syscall.Errno(4000)) != "EIO" {
		t.Error("an errno no one knows is not EIO")
	}
}

// TestDefaultStore: SPEC 1's default store: /var/lib/ctxfs for root, else
// $XDG_DATA_HOME/ctxfs, else ~/.local/share/ctxfs; CTXFS_STORE overrides
// each.
func TestDefaultStore(t *testing.T) {
	cases := []struct {
		uid  int
		env  map[string]string
		want string
	}{
		{0, map[string]string{"HOME": "/root", "XDG_DATA_HOME": "/root/.data"}, "/var/lib/ctxfs"},
		{1000, map[string]string{"HOME": "/home/u", "XDG_DATA_HOME": "/home/u/.data"}, "/home/u/.data/ctxfs"},
		{1000, map[string]string{"HOME": "/home/u"}, "/home/u/.local/share/ctxfs"},
		{0, map[string]string{"CTXFS_STORE": "/srv/s"}, "/srv/s"},
		{1000, map[string]string{"HOME": "/home/u", "XDG_DATA_HOME": "/x", "CTXFS_STORE": "/srv/s"}, "/srv/s"},
	}
	for _, c := range cases {
		if got := DefaultStore(c.uid, func(k string) string { return c.env[k] }); got != c.want {
			t.Errorf("DefaultStore(%d, %v) = %s, want %s", c.uid, c.env, got, c.want)
		}
	}
}
