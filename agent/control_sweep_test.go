package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestSweepControls: the control directories of servers gone are
// removed; this server's, one of a live process, another user's, a link,
// and names of another shape stay.
func TestSweepControls(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the directories swept are root's")
	}
	dir := t.TempDir()
	gone := exec.Command("true")
	testkit.Must(t, gone.Run())
	dead := strconv.Itoa(gone.Process.Pid)
	self := strconv.Itoa(os.Getpid())
	mk := func(name string, uid int) string {
		p := filepath.Join(dir, name)
		testkit.Must(t, os.Mkdir(p, 0o711))
		testkit.Must(t, os.WriteFile(filepath.Join(p, "control"), nil, 0o600))
		testkit.Must(t, os.Lchown(p, uid, uid))
		return p
	}
	swept := mk(controlPrefix+dead+"-1", 0)
	kept := []string{
		mk(controlPrefix+self+"-2", 0),
		mk(controlPrefix+dead+"-3", 1001), // another user's
		mk(controlPrefix+"x"+dead+"-4", 0),
		mk(controlPrefix+"12345678", 0), // the old shape: no pid
	}
	link := filepath.Join(dir, controlPrefix+dead+"-5")
	testkit.Must(t, os.Symlink(kept[0], link))
	kept = append(kept, link)
	if n := SweepControls(dir); n != 1 {
		t.Errorf("swept %d directories, want 1", n)
	}
	if _, err := os.Lstat(swept); !os.IsNotExist(err) {
		t.Errorf("a dead server's control directory is still there: %v", err)
	}
	for _, p := range kept {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(kept[0], "control")); err != nil {
		t.Errorf("a live server's socket went through a link: %v", err)
	}
}
