package abi

import "testing"

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
