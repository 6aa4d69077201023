package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// notifySocket listens where systemd would (an abstract unixgram socket,
// as $NOTIFY_SOCKET names it: '@' and a name).
func notifySocket(t *testing.T) (*net.UnixConn, string) {
	t.Helper()
	name := fmt.Sprintf("@ctxfs-notify-%d-%d", os.Getpid(), time.Now().UnixNano())
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	testkit.Must(t, err)
	t.Cleanup(func() { c.Close() })
	return c, name
}

// nextNotification reads one datagram, "" when none came within limit.
func nextNotification(c *net.UnixConn, limit time.Duration) string {
	c.SetReadDeadline(time.Now().Add(limit))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

// `ctxfs mount --foreground` under systemd (Type=notify): READY=1 once
// both mounts answer, STOPPING=1 at SIGTERM, and nothing else; its
// children (the watchdog) do not inherit $NOTIFY_SOCKET; without
// --log-file it logs on stderr.
func TestSystemdReadiness(t *testing.T) {
	requireFUSE(t)
	c, name := notifySocket(t)
	s := newServerWith(t, func(s *server) { s.env = []string{"NOTIFY_SOCKET=" + name} })
	if got := nextNotification(c, 20*time.Second); got != "READY=1" {
		t.Fatalf("got %q, want READY=1; log:\n%s", got, s.logText())
	}
	for _, d := range []string{"home", "shared"} {
		if mountsAt(s.mnt(d)) != 1 {
			t.Errorf("READY=1 came before %s was mounted", d)
		}
		if _, err := os.Stat(s.mnt(d)); err != nil {
			t.Errorf("READY=1 came before %s answered: %v", d, err)
		}
	}
	if wd := watchdogOf(s.cmd.Process.Pid); wd != 0 {
		env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", wd))
		if strings.Contains(string(env), "NOTIFY_SOCKET=") {
			t.Errorf("the watchdog inherited NOTIFY_SOCKET")
		}
	}
	s.kill(s.cmd, syscall.SIGTERM)
	if got := nextNotification(c, 10*time.Second); got != "STOPPING=1" {
		t.Errorf("got %q, want STOPPING=1", got)
	}
	if code := s.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("the server exited %d after SIGTERM", code)
	}
	if got := nextNotification(c, 200*time.Millisecond); got != "" {
		t.Errorf("an extra notification: %q", got)
	}
	if log := s.logText(); !strings.Contains(log, " msg=ready ") || !strings.Contains(log, " systemd=true") {
		t.Errorf("the foreground server's stderr has no ready line:\n%s", log)
	}
}

// A background `ctxfs mount` is no Type=notify service: its server does
// not speak to systemd, even with $NOTIFY_SOCKET set.
func TestBackgroundMountSendsNoReadiness(t *testing.T) {
	requireFUSE(t)
	c, name := notifySocket(t)
	s := unstartedServer(t)
	root, store := s.root, s.store
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctxfsBin, "mount", "--root", root, "--store", store)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+name)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ctxfs mount: %v\n%s", err, out)
	}
	if got := nextNotification(c, time.Second); got != "" {
		t.Errorf("a background server notified %q", got)
	}
	if out, err := exec.CommandContext(ctx, ctxfsBin, "umount", "--root", root).CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(store, "ctxfs.log"))
		t.Fatalf("ctxfs umount: %v\n%s\nthe server's log ends:\n%s", err, out, lastLines(string(log), 10))
	}
}
