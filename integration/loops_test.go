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

// TestRemoveDeadLoops: TestMain's sweep unmounts and detaches the loop
// device of an image named for an ended PID, and leaves this binary's.
func TestRemoveDeadLoops(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: loop devices are root's")
	}
	ended := exec.Command("true")
	testkit.Must(t, ended.Run())
	deadName := fmt.Sprintf("ctxfs-ext4-%d.img", ended.Process.Pid)
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
