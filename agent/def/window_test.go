package def

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestLoadWindowInvalid: window, compact and compact.strategy take auto
// or a token count, and truncate, summarize or an executable of
// compact.d/; anything else is EINVAL naming its file.
func TestLoadWindowInvalid(t *testing.T) {
	cases := []struct{ file, value string }{
		{"window", "0\n"}, {"window", "-5\n"}, {"window", "128k\n"}, {"window", "AUTO\n"},
		{"window", "255\n"}, {"window", "10000001\n"}, {"window", "0128000\n"}, {"window", "1\n2\n"},
		{"compact", "\n"}, {"compact", "1.5\n"}, {"compact", "99999999999999999999\n"},
		{"compact.strategy", "Truncate\n"}, {"compact.strategy", "../bin/sh\n"},
		{"compact.strategy", "missing\n"}, {"compact.strategy", "notexec\n"}, {"compact.strategy", "\n"},
	}
	for _, c := range cases {
		root := t.TempDir()
		dir := filepath.Join(root, "agent", "a.d")
		testkit.WriteFile(t, filepath.Join(dir, c.file), c.value, 0o644)
		testkit.WriteFile(t, filepath.Join(dir, "compact.d", "notexec"), "#!/bin/sh\n", 0o644)
		_, err := Load(root, abi.KindAgent, "a")
		testkit.WantErrno(t, c.file+"="+c.value, err, syscall.EINVAL)
	}
}

// TestLoadWindowProgram: a compact.d/ executable is the strategy, with
// its host path.
func TestLoadWindowProgram(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "agent", "a.d")
	testkit.WriteFile(t, filepath.Join(dir, "compact.strategy"), "digest\n", 0o644)
	testkit.WriteFile(t, filepath.Join(dir, "compact.d", "digest"), "#!/bin/sh\n", 0o755)
	testkit.WriteFile(t, filepath.Join(dir, "window"), "auto\n", 0o644)
	testkit.WriteFile(t, filepath.Join(dir, "compact"), "2000\n", 0o644)
	d, err := Load(root, abi.KindAgent, "a")
	if err != nil {
		t.Fatal(err)
	}
	want := WindowDef{Compact: 2000, Strategy: "digest", Program: filepath.Join(dir, "compact.d", "digest")}
	if d.WindowDef != want {
		t.Fatalf("WindowDef = %+v, want %+v", d.WindowDef, want)
	}
	if l := d.Limits(); l.Window != 128000 || l.CompactAt != 2000 || l.Reserve != 4096 {
		t.Fatalf("Limits = %+v", l)
	}
}
