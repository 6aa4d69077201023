package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// fsckEnv runs `ctxfs fsck ARGS` with only env set (no CTXFS_STORE unless
// given), and returns its stdout, stderr and exit status.
func fsckEnv(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(ctxfsBin, append([]string{"fsck"}, args...)...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=/"}, env...)
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errs.String(), code
}

// TestFsckSaysWhatItChecked: without --store and $CTXFS_STORE, fsck checks
// the store of the server of the mount root (its pid file names it), and
// says so; a clean store is said "clean"; --repair says what to do about a
// log whose bytes differ from what its seal vouches for, which it never
// rewrites.
func TestFsckSaysWhatItChecked(t *testing.T) {
	s := newServer(t)
	s.mustRequest("coder", `{"op":"send","id":"c1","session":"s1","input":"hello"}`)
	out, errs, code := fsckEnv(t, []string{"CTX_ROOT=" + s.root})
	if code != 0 || out != "clean\n" || !strings.Contains(errs, s.store+", the store of the server of "+s.root) {
		t.Fatalf("fsck of the running server's store: exit %d\nstdout %q\nstderr %q", code, out, errs)
	}

	s.kill(s.cmd, syscall.SIGTERM)
	log := filepath.Join(s.sessionDir(0, "coder", "s1"), "messages.jsonl")
	b, err := os.ReadFile(log)
	testkit.Must(t, err)
	b[len(b)-3] ^= 0x20 // the same length, another byte: a digest mismatch
	testkit.Must(t, os.WriteFile(log, b, 0o600))
	before := hostSnapshot(t, s.store)
	out, _, code = fsckEnv(t, nil, "--store", s.store, "--repair")
	line := fsckLine(out, log+": ", "does not match")
	if code != 1 || !strings.Contains(line, "--repair does not rewrite history: stop the server and put back the bytes the seal vouches for (from a backup)") {
		t.Errorf("fsck --repair of a digest mismatch: exit %d, want 1 and what to do:\n%s", code, out)
	}
	if diffs, _ := hostDiffs(before, hostSnapshot(t, s.store)); len(diffs) > 0 {
		t.Errorf("--repair changed a log it cannot repair: %v", diffs)
	}
}
