package inspect

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestHelperPath: ctx-trajectory is found beside ctx's program first,
// then on $PATH, else the error says ENOENT and where it belongs.
func TestHelperPath(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if _, err := helperPath(); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("no helper anywhere: %v, want ENOENT", err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, helperName)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	if got, err := helperPath(); err != nil || got != p {
		t.Fatalf("on $PATH: %q %v, want %q", got, err, p)
	}
}
