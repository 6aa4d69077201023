package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestRemoveDeadBinDirs: TestMain's sweep removes the binaries' directory
// of an ended PID, and leaves this binary's, another uid's of an ended
// PID, and one of the old name (no PID: whose it is cannot be told).
func TestRemoveDeadBinDirs(t *testing.T) {
	ended := testkit.EndedPID(t)
	name := func(pid, n int) string { return fmt.Sprintf("%s%d-%d", binDirPrefix, pid, n) }
	dead, mine, others, old := name(ended, 1), name(os.Getpid(), 2), name(ended, 3), binDirPrefix+"4"
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

// TestRemoveDeadLoops: TestMain's sweep unmounts and detaches the loop
// device of an image named for an ended PID, and leaves this binary's.
func TestRemoveDeadLoops(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: loop devices are root's")
	}
	deadName := fmt.Sprintf("ctxfs-ext4-%d.img", testkit.EndedPID(t))
	dead, mine := ext4Image(t, 8, deadName), smallExt4(t, 8)
	deadImg := filepath.Join(filepath.Dir(dead), deadName)
	bound, _ := exec.Command("losetup", "-n", "-O", "NAME", "-j", deadImg).Output()
	dev := strings.TrimSpace(string(bound))
	if got := removeDeadLoops(); !slices.Contains(got, dev) {
		t.Fatalf("detached %v; want %q among them", got, dev)
	}
	if n := mountsAt(dead); n != 0 {
		t.Errorf("the ended PID's ext4 is still mounted at %s (%d mounts)", dead, n)
	}
	if out, _ := exec.Command("losetup", "-n", "-j", deadImg).Output(); len(out) != 0 {
		t.Errorf("the ended PID's image is still on a loop device: %s", out)
	}
	if n := mountsAt(mine); n != 1 {
		t.Errorf("this binary's ext4 at %s: %d mounts, want 1", mine, n)
	}
}
