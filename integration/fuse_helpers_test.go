package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// requireFUSE skips a test that needs to mount FUSE as root when this
// machine cannot; with CTXFS_REQUIRE_FUSE set it fails instead.
func requireFUSE(t testing.TB) {
	t.Helper()
	var why string
	if os.Geteuid() != 0 {
		why = "not root (the end-to-end mount tests need real uids and mount(2))"
	} else if f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0); err != nil {
		why = fmt.Sprintf("/dev/fuse: %v", err)
	} else {
		f.Close()
		return
	}
	if os.Getenv("CTXFS_REQUIRE_FUSE") != "" {
		t.Fatalf("FUSE required (CTXFS_REQUIRE_FUSE) but unusable: %s", why)
	}
	t.Skipf("FUSE unusable: %s", why)
}

// newFuseServer is newServer for tests that go through the mount, with the
// temporary directories above the root opened to every uid.
func newFuseServer(t *testing.T) *server { return newFuseServerWith(t, nil) }

// newFuseServerWith is newServerWith for tests that go through the mount:
// it returns once both mounts are up. A path used before then is the bare
// mountpoint's: a MkdirAll made there is hidden when the mount comes up,
// and the file created next through the mount is ENOENT (the jail set-up
// failed so in 1 to 9 starts of 100, by load).
func newFuseServerWith(t *testing.T, configure func(*server)) *server {
	t.Helper()
	requireFUSE(t)
	s := newServerWith(t, configure)
	openToAll(t, s.root)
	// The server answers its sockets before its mounts are up.
	eventually(t, 10*time.Second, "one live mount each at home and shared", func() bool {
		return mountsAt(s.mnt("home")) == 1 && mountsAt(s.mnt("shared")) == 1
	})
	return s
}

// openToAll makes every directory above root traversable by other uids
// (t.TempDir's own directory is 0700).
func openToAll(t testing.TB, root string) {
	for d := filepath.Dir(root); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
}

// tmpDirForAll is a new directory of /tmp that every uid may enter
// (0755; t.TempDir's parent is 0700), removed at the test's end.
func tmpDirForAll(t testing.TB, prefix string) string {
	dir, err := os.MkdirTemp("/tmp", prefix)
	testkit.Must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	testkit.Must(t, os.Chmod(dir, 0o755))
	return dir
}

// mnt is a path in the mount.
func (s *server) mnt(rel string) string { return filepath.Join(s.root, rel) }

const (
	coderRel = "home/0/agent/coder"
	cmdLimit = 20 * time.Second // no external command may take longer
)

// sessRel is the mount path of root's coder session name.
func sessRel(name string) string { return coderRel + "/session/" + name }

// send makes (or extends) one of root's coder sessions through the socket.
func (s *server) send(session, id, input string) []frame {
	s.t.Helper()
	frames := s.mustRequest("coder", fmt.Sprintf(`{"op":"send","id":%q,"session":%q,"input":%q}`, id, session, input))
	if len(frames) == 0 || frames[len(frames)-1]["type"] != "done" {
		s.t.Fatalf("send to %s: %v", session, frames)
	}
	return frames
}

// cred says who runs an external command; nil is root.
type cred struct {
	uid, gid uint32
	groups   []uint32
}

// runCmd runs name with args as c, with a deadline, and returns its
// combined output.
func runCmd(t testing.TB, c *cred, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "LC_ALL=C", "TERM=dumb", "HOME=/"}, env...)
	cmd.SysProcAttr = testkit.ChildAttr()
	if c != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: c.uid, Gid: c.gid, Groups: c.groups}
	}
	cmd.Dir = "/"
	cmd.WaitDelay = 2 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Errorf("%s %v: timed out after %v; output %q", name, args, cmdLimit, out)
	}
	return string(out), err
}

// bash runs a bash script as root and fails the test when it fails.
func bash(t testing.TB, script string) string {
	t.Helper()
	out, err := runCmd(t, nil, nil, "/bin/bash", "-c", script)
	if err != nil {
		t.Fatalf("bash %q: %v\n%s", script, err, out)
	}
	return out
}

// bashAs runs a bash script as c; the error is the caller's to judge.
func bashAs(t testing.TB, c *cred, script string) (string, error) {
	t.Helper()
	return runCmd(t, c, nil, "/bin/bash", "-c", script)
}

// afterClose bounds what the server does behind a call that has returned:
// what it records or invalidates at the RELEASE the kernel sends after a
// close(2) (a partial line's error event, a refused name's removal, a copy
// given back), and the dentries its notifier goroutine drops after a
// change (fs/notify.go, never waited for). Each comes behind every request
// queued before it; on 2 loaded cores (two test processes beside
// stress-ng) that is not the second or two an idle machine takes, and no
// rule bounds it tighter.
const afterClose = 10 * time.Second

// eventually polls cond for up to limit.
func eventually(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Errorf("timed out after %v: %s", limit, what)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitUntil polls cond until it holds; after limit the test fails with
// the message fail gives then (what the process printed so far).
func waitUntil(t testing.TB, limit time.Duration, cond func() bool, fail func() string) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("within %v: %s", limit, fail())
		}
	}
}

// exitWithin waits up to limit for cmd, whose waiter closes exited, and
// returns its exit status; after limit the test fails with output().
func exitWithin(t testing.TB, cmd *exec.Cmd, exited <-chan struct{}, limit time.Duration, output func() string) int {
	t.Helper()
	select {
	case <-exited:
	case <-time.After(limit):
		t.Fatalf("%q did not end within %v; %s", cmd.Args, limit, output())
	}
	return cmd.ProcessState.ExitCode()
}

// readMnt reads a file through the mount, failing the test on error.
func (s *server) readMnt(rel string) string {
	s.t.Helper()
	b, err := os.ReadFile(s.mnt(rel))
	if err != nil {
		s.t.Fatalf("read %s: %v", rel, err)
	}
	return string(b)
}

// appendMnt appends data through the mount with one write and a close.
func appendMnt(path, data string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(data)
	cerr := f.Close()
	if werr != nil {
		return werr
	}
	return cerr
}

// runCmdLimit runs a command as root with a deadline of secs seconds.
func runCmdLimit(t testing.TB, secs int, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs)*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = testkit.ChildAttr()
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Errorf("%s: timed out after %d s", name, secs)
	}
	return string(out), err
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

// crash SIGKILLs the server without unmounting anything, and returns a
// channel closed once the process is reaped. That may only happen after
// the next server started: a server thread that was inside the kernel
// (an invalidation waiting for a page a reader holds) keeps the process
// from ending until its connection is aborted.
func (s *server) crash() <-chan struct{} {
	cmd := s.cmd
	cmd.Process.Kill()
	done := make(chan struct{})
	s.crashed.Store(cmd, (<-chan struct{})(done))
	go func() { cmd.Wait(); close(done) }()
	return done
}

// reaped waits for a crashed server to be reaped.
func reaped(t testing.TB, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the killed server was not reaped 20 s after the next one started")
	}
}

// keepFusectlAsIs: a server started after a crash may mount fusectl to
// abort the dead connection; leave the machine as it was.
func keepFusectlAsIs(t testing.TB) {
	if mountsAt(fusectlDir) == 0 {
		t.Cleanup(func() { runCmd(t, nil, nil, "umount", fusectlDir) })
	}
}

// fusectlDir is where the kernel's FUSE control filesystem is mounted.
const fusectlDir = "/sys/fs/fuse/connections"
