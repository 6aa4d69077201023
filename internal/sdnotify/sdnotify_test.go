package sdnotify

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// listen makes a real unixgram socket at name, as systemd does.
func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func receive(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

// A path and an abstract name both get the datagram, and the variable is
// gone from the environment afterwards (children never inherit it).
func TestNotifyPathAndAbstract(t *testing.T) {
	for _, name := range []string{
		filepath.Join(t.TempDir(), "notify"),
		fmt.Sprintf("@ctxfs-sdnotify-test-%d", os.Getpid()),
	} {
		c := listen(t, name)
		t.Setenv("NOTIFY_SOCKET", name)
		n, err := FromEnv()
		if err != nil || n == nil {
			t.Fatalf("%s: FromEnv: %v, %v", name, n, err)
		}
		if v, ok := os.LookupEnv("NOTIFY_SOCKET"); ok {
			t.Errorf("%s: NOTIFY_SOCKET still set (%q)", name, v)
		}
		for _, state := range []string{"READY=1", "STOPPING=1"} {
			if err := n.Notify(state); err != nil {
				t.Fatalf("%s: Notify: %v", name, err)
			}
			if got := receive(t, c); got != state {
				t.Errorf("%s: got %q, want %q", name, got, state)
			}
		}
	}
}

// Without the variable nothing is sent and nothing fails; an address that
// is neither a path nor an abstract name is refused.
func TestNotifyUnsetAndBad(t *testing.T) {
	os.Unsetenv("NOTIFY_SOCKET")
	n, err := FromEnv()
	if n != nil || err != nil {
		t.Fatalf("unset: %v, %v", n, err)
	}
	if err := n.Notify("READY=1"); err != nil {
		t.Fatalf("nil Notifier: %v", err)
	}
	for _, bad := range []string{"relative/sock", "@", "vsock:2:1234"} {
		t.Setenv("NOTIFY_SOCKET", bad)
		if n, err := FromEnv(); n != nil || err == nil {
			t.Errorf("NOTIFY_SOCKET=%q: %v, %v; want an error", bad, n, err)
		}
	}
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "nobody-listens"))
	n, _ = FromEnv()
	if err := n.Notify("READY=1"); err == nil {
		t.Errorf("a socket nobody listens on: no error")
	}
}
