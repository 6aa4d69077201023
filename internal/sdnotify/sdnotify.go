// Package sdnotify tells systemd how the server is doing (sd_notify(3)):
// one datagram, such as "READY=1", to the Unix socket that $NOTIFY_SOCKET
// names (a path, or an abstract name starting with '@'). Without the
// variable it does nothing, so that a server started by hand, by another
// init or by `ctxfs mount` in the background is unaffected.
package sdnotify

import (
	"fmt"
	"net"
	"os"
)

// Notifier sends to the socket systemd gave the process; nil sends
// nothing.
type Notifier struct{ addr *net.UnixAddr }

// FromEnv takes $NOTIFY_SOCKET and removes it from the environment: the
// processes the server starts (its watchdog, agents) must never speak to
// systemd in the server's name. It returns nil when the variable is unset,
// and an error (with a nil Notifier) for an address it cannot use.
func FromEnv() (*Notifier, error) {
	name := os.Getenv("NOTIFY_SOCKET")
	os.Unsetenv("NOTIFY_SOCKET")
	if name == "" {
		return nil, nil
	}
	// Go's net package maps a leading '@' to the abstract namespace.
	if name[0] != '/' && name[0] != '@' || len(name) < 2 {
		return nil, fmt.Errorf("NOTIFY_SOCKET %q: not a Unix socket path nor an abstract name", name)
	}
	return &Notifier{addr: &net.UnixAddr{Name: name, Net: "unixgram"}}, nil
}

// Notify sends one state ("READY=1", "STOPPING=1", "STATUS=…").
func (n *Notifier) Notify(state string) error {
	if n == nil {
		return nil
	}
	conn, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("sd_notify %s: %w", state, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("sd_notify %s: %w", state, err)
	}
	return nil
}
