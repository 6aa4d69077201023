package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// A GlusterFS 10 volume for the tests, on this one machine: glusterd runs
// in the foreground inside a network namespace the test makes (it
// refuses a loopback address for a brick), with a volfile of the test's
// own that keeps its state, its run directory and its CLI socket under
// t.TempDir; one brick on the test's disk; two FUSE clients on the host
// (glusterfs -N, in the foreground) stand in for two hosts. At cleanup
// the clients are killed by PID and detached, the volume is stopped and
// its brick process (which glusterd starts as a daemon) killed by the PID
// it wrote, if that PID is still this brick's, and glusterd killed by
// PID; the namespace goes last.

// glusterfs is one running volume and its two client mounts.
type glusterfs struct {
	a, b   string // the two client mountpoints ("host A", "host B")
	addr   string // glusterd's and the brick's address inside the namespace
	dir    string // volfile, state, brick and logs
	vol    string // the volume's name
	mounts dfsClients
}

// requireGlusterFS skips a test when GlusterFS (or root, or ip) is
// missing; with CTXFS_REQUIRE_GLUSTERFS=1 (CI) it fails instead.
func requireGlusterFS(t testing.TB) {
	t.Helper()
	requireTools(t, "GlusterFS", "glusterfs-server, glusterfs-client", "CTXFS_REQUIRE_GLUSTERFS",
		"glusterd", "gluster", "glusterfs", "ip")
}

// startGlusterFS starts glusterd and a volume of one brick, and returns
// once both client mounts are up and a file written through one is read
// through the other.
func startGlusterFS(t testing.TB) *glusterfs {
	t.Helper()
	requireGlusterFS(t)
	nn := testkit.MakeNetNS(t, "gl") // deleted after the cleanup below
	g := &glusterfs{dir: t.TempDir(), addr: nn.NSAddr, vol: fmt.Sprintf("ctxfs%d", os.Getpid()), mounts: dfsClients{}}
	os.Chmod(g.dir, 0o755)
	for _, d := range []string{"state", "run", "brick", "log"} {
		testkit.Must(t, os.Mkdir(filepath.Join(g.dir, d), 0o755))
	}
	testkit.Must(t, os.WriteFile(filepath.Join(g.dir, "glusterd.vol"), []byte(g.volfile()), 0o644))
	log, err := os.Create(filepath.Join(g.dir, "log", "glusterd.out"))
	testkit.Must(t, err)
	defer log.Close()
	daemon := exec.Command("ip", "netns", "exec", nn.Name, "glusterd", "-N", "-f", filepath.Join(g.dir, "glusterd.vol"),
		"--log-file", filepath.Join(g.dir, "log", "glusterd.log"))
	daemon.Stdout, daemon.Stderr = log, log
	daemon.SysProcAttr = testkit.ChildAttr()
	testkit.Must(t, daemon.Start())
	t.Cleanup(func() {
		g.mounts.unmountAll(t)
		g.cli(t, "volume", "stop", g.vol, "force")
		g.killBrick()
		killGroup(daemon)
	})
	eventually(t, 30*time.Second, "glusterd answering its CLI", func() bool {
		_, err := g.cli(t, "volume", "list")
		return err == nil
	})
	brick := g.addr + ":" + filepath.Join(g.dir, "brick")
	for _, args := range [][]string{{"volume", "create", g.vol, brick, "force"}, {"volume", "start", g.vol}} {
		if out, err := g.cli(t, args...); err != nil {
			t.Fatalf("gluster %s: %v\n%s\n%s", strings.Join(args, " "), err, out, g.logTail())
		}
	}
	g.a, g.b = g.mount(t, "a"), g.mount(t, "b")
	waitShared(t, g.a, g.b)
	// A store's server refuses a directory above its store that every
	// user may write.
	testkit.Must(t, os.Chmod(g.a, 0o755))
	return g
}

// volfile is glusterd's: its state, run directory and CLI socket under
// the test's directory, not /var/lib/glusterd and /run.
func (g *glusterfs) volfile() string {
	return fmt.Sprintf(`volume management
    type mgmt/glusterd
    option working-directory %s
    option run-directory %s
    option glusterd-sockfile %s
    option transport-type socket
    option transport.socket.listen-port 24007
    option ping-timeout 0
    option event-threads 1
end-volume
`, filepath.Join(g.dir, "state"), filepath.Join(g.dir, "run"), g.sock())
}

func (g *glusterfs) sock() string { return filepath.Join(g.dir, "glusterd.socket") }

// cli runs the gluster CLI on this glusterd, bounded.
func (g *glusterfs) cli(t testing.TB, args ...string) (string, error) {
	return runBounded(t, "gluster", append([]string{"--glusterd-sock=" + g.sock(), "--mode=script"}, args...)...)
}

// mount starts one client in the foreground on a new directory and waits
// for its mount.
func (g *glusterfs) mount(t testing.TB, name string) string {
	dir := filepath.Join(g.dir, "mnt-"+name)
	testkit.Must(t, os.MkdirAll(dir, 0o755))
	cmd := exec.Command("glusterfs", "-N", "--volfile-server="+g.addr, "--volfile-id="+g.vol,
		"--log-file="+filepath.Join(g.dir, "log", "client-"+name+".log"), dir)
	g.mounts.start(t, dir, cmd)
	return dir
}

// killBrick kills the brick process by the PID it wrote, if that process
// is still this brick's (its command line names the brick's directory).
func (g *glusterfs) killBrick() {
	pids, _ := filepath.Glob(filepath.Join(g.dir, "run", "vols", g.vol, "*.pid"))
	for _, p := range pids {
		b, _ := os.ReadFile(p)
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 1 {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.Contains(string(cmdline), filepath.Join(g.dir, "brick")) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// logTail is the end of glusterd's log, for a failure message.
func (g *glusterfs) logTail() string {
	b, _ := os.ReadFile(filepath.Join(g.dir, "log", "glusterd.log"))
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}
