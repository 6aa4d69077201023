package abi

import (
	"strings"
	"testing"
)

func TestValidName(t *testing.T) {
	good := []string{"a", "default", "review-1", "A.b_c+d-e", strings.Repeat("x", 64), "0", "x.socks", "x.dd"}
	bad := []string{"", ".", "..", "-a", ".a", "_a", "a/b", "a b", "a\x00", strings.Repeat("x", 65), "x.sock", "x.d", "é", "a:b"}
	for _, s := range good {
		if !ValidName(s) {
			t.Errorf("ValidName(%q) = false", s)
		}
	}
	for _, s := range bad {
		if ValidName(s) {
			t.Errorf("ValidName(%q) = true", s)
		}
	}
	if ValidSessionName("index") || !ValidName("index") {
		t.Error("index must be a valid name but not a valid session name")
	}
}

func TestValidUUID(t *testing.T) {
	if !ValidUUID("123e4567-e89b-12d3-a456-426614174000") {
		t.Error("canonical uuid refused")
	}
	for _, s := range []string{"123E4567-E89B-12D3-A456-426614174000", "123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400g", ""} {
		if ValidUUID(s) {
			t.Errorf("ValidUUID(%q) = true", s)
		}
	}
}

// Golden values: computed independently with the FNV-1a definition
// (offset basis 0xcbf29ce484222325, prime 0x100000001b3).
func TestCwdKeyGolden(t *testing.T) {
	cases := map[string]string{
		"":           "cwd-cbf29ce484222325",
		"/":          "cwd-af63a24c860189fe",
		"/workspace": "cwd-990e10b3394addcf", // python3 reference, see comment above
		"/工作区/项目":    "cwd-702419c5df43d49f",
	}
	for cwd, want := range cases {
		if got := CwdKey(cwd); got != want {
			t.Errorf("CwdKey(%q) = %s, want %s", cwd, got, want)
		}
		if ref := "cwd-" + fnvRef(cwd); ref != want {
			t.Errorf("reference FNV of %q = %s, want %s", cwd, ref, want)
		}
		if !ValidCwdKey(CwdKey(cwd)) {
			t.Errorf("ValidCwdKey(CwdKey(%q)) = false", cwd)
		}
	}
}

// fnvRef is a byte-by-byte reference implementation, independent of hash/fnv.
func fnvRef(s string) string {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 0x100000001b3
	}
	const digits = "0123456789abcdef"
	out := make([]byte, 16)
	for i := 15; i >= 0; i-- {
		out[i] = digits[h&15]
		h >>= 4
	}
	return string(out)
}

func TestCheckCwd(t *testing.T) {
	for _, s := range []string{"/", "/workspace", "/a/b/", "/a/./b", "/a/..b", "/中文"} {
		if err := CheckCwd(s); err != nil {
			t.Errorf("CheckCwd(%q) = %v", s, err)
		}
	}
	for _, s := range []string{"", "rel", "/a/../b", "/..", "/a/b/..", "/a\nb", "/a\rb", "/a\x00b"} {
		if err := CheckCwd(s); err == nil {
			t.Errorf("CheckCwd(%q) = nil", s)
		}
	}
}

func TestRunID(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		id, err := NewRunID()
		if err != nil {
			t.Fatal(err)
		}
		if !IsRunID(id) {
			t.Fatalf("bad run id %q", id)
		}
		if seen[id] {
			t.Fatalf("run id %q drawn twice", id)
		}
		seen[id] = true
	}
}
