package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// What the distributed filesystems of the tests (MooseFS, GlusterFS)
// share: the check that their packages are there, their client
// processes, and the wait for a volume both clients see.

// requireTools skips a test when any of need is missing (a program on
// PATH, or an absolute path that must exist), saying that scripts/deps.sh
// installs packages; with env=1 (CI) it fails instead. FUSE is needed too.
func requireTools(t testing.TB, what, packages, env string, need ...string) {
	t.Helper()
	requireFUSE(t)
	var missing []string
	for _, n := range need {
		var err error
		if filepath.IsAbs(n) {
			_, err = os.Stat(n)
		} else {
			_, err = exec.LookPath(n)
		}
		if err != nil {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return
	}
	why := fmt.Sprintf("%s missing (%s): scripts/deps.sh installs %s", what, strings.Join(missing, ", "), packages)
	if os.Getenv(env) == "1" {
		t.Fatalf("%s (%s=1)", why, env)
	}
	t.Skip(why)
}

// dfsClients are a filesystem's client processes, each in the foreground
// in a process group of its own, by the directory it mounts.
type dfsClients map[string]*exec.Cmd

// start runs cmd, the client that mounts dir, and waits for its mount.
func (c dfsClients) start(t testing.TB, dir string, cmd *exec.Cmd) {
	cmd.SysProcAttr = testkit.ChildAttr()
	testkit.Must(t, cmd.Start())
	c[dir] = cmd
	eventually(t, 30*time.Second, filepath.Base(cmd.Path)+" at "+dir, func() bool { return mountsAt(dir) == 1 })
}

// unmountAll detaches every client (lazily: a test may leave a file open)
// and kills its process.
func (c dfsClients) unmountAll(t testing.TB) {
	for dir := range c {
		runBounded(t, "umount", "-l", dir)
		c.drop(dir)
	}
}

// kill SIGKILLs the client behind dir ("the host dies") and detaches its
// dead mount.
func (c dfsClients) kill(t testing.TB, dir string) {
	c.drop(dir)
	runBounded(t, "umount", "-l", dir)
}

func (c dfsClients) drop(dir string) {
	killGroup(c[dir])
	delete(c, dir)
}

// waitShared waits until a file written through mount a is read back
// through mount b (a volume's servers take a while to offer space), and
// removes it.
func waitShared(t testing.TB, a, b string) {
	eventually(t, 30*time.Second, "a file written on one client read on the other", func() bool {
		if err := os.WriteFile(filepath.Join(a, ".ready"), []byte("ready"), 0o644); err != nil {
			return false
		}
		got, err := os.ReadFile(filepath.Join(b, ".ready"))
		return err == nil && string(got) == "ready"
	})
	os.Remove(filepath.Join(a, ".ready"))
}
