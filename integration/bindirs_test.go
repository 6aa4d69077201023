package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestRemoveDeadBinDirs: TestMain's sweep removes the binaries' directory
// of an ended PID, and leaves this binary's, another uid's of an ended
// PID, and one of the old name (no PID: whose it is cannot be told).
func TestRemoveDeadBinDirs(t *testing.T) {
	ended := exec.Command("true")
	testkit.Must(t, ended.Run())
	name := func(pid, n int) string { return fmt.Sprintf("%s%d-%d", binDirPrefix, pid, n) }
	dead, mine, others, old := name(ended.Process.Pid, 1), name(os.Getpid(), 2), name(ended.Process.Pid, 3), binDirPrefix+"4"
	for _, d := range []string{dead, mine, others, old} {
		p := filepath.Join(os.TempDir(), d)
		testkit.Must(t, os.Mkdir(p, 0o755))
		t.Cleanup(func() { os.RemoveAll(p) })
		testkit.Must(t, os.WriteFile(filepath.Join(p, "ctxfs"), []byte("binary"), 0o755))
	}
	if os.Geteuid() == 0 {
		testkit.Must(t, os.Chown(filepath.Join(os.TempDir(), others), 1001, 1001))
	}
	removeDeadBinDirs()
	for d, want := range map[string]bool{dead: false, mine: true, others: os.Geteuid() == 0, old: true} {
		if _, err := os.Stat(filepath.Join(os.TempDir(), d, "ctxfs")); (err == nil) != want {
			t.Errorf("%s after the sweep: %v; want it there: %v", d, err, want)
		}
	}
}
