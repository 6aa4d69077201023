package integration

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tcpListener is a python3 TCP server for argv[1]:argv[2] that accepts
// and closes connections until killed; it prints "ready" once listening.
const tcpListener = `
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(64)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.close()
`

// tcpDial connects to argv[1]:argv[2] within 1 s: exit 0 when it could,
// 1 (and the error) when not.
const tcpDial = `
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close()
except OSError as e:
    print(e); sys.exit(1)
`

const probePort = "7411"

// dialFrom reports whether a TCP connect from host from (nil: the test
// process) to addr:probePort succeeds within 1 s.
func dialFrom(t *testing.T, from *netHost, addr string) bool {
	t.Helper()
	if from == nil {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, probePort), time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}
	cmd := exec.Command("/usr/bin/python3", "-c", tcpDial, addr, probePort)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	startInNetns(t, from, cmd)
	err := cmd.Wait()
	return err == nil
}

// listen starts a TCP listener on h's address and waits until it listens.
func listen(t *testing.T, h *netHost) {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", "-c", tcpListener, h.addr, probePort)
	out := &lineRecorder{}
	cmd.Stdout, cmd.Stderr = out, out
	startInNetns(t, h, cmd)
	waitUntil(t, 10*time.Second, func() bool {
		ls := out.snapshot()
		return len(ls) > 0 && ls[0] == "ready"
	}, func() string { return fmt.Sprintf("the listener on %s did not start: %q", h.name, out.snapshot()) })
}

// TestNetnsPartition: three hosts and the test process reach each other
// over the test network; a partitioned host reaches no one and no one
// reaches it, while the others still reach each other; after heal all
// connect again. Each host's listener binds its own address: a process
// started with startInNetns runs in that host's namespace (the bind would
// fail anywhere else).
func TestNetnsPartition(t *testing.T) {
	tn := newTestNet(t)
	a, b, c := tn.addHost("a"), tn.addHost("b"), tn.addHost("c")
	for _, h := range []*netHost{a, b, c} {
		listen(t, h)
	}
	reach := func(from, to *netHost) bool { return dialFrom(t, from, to.addr) }
	fromRoot := func(to *netHost) bool { return dialFrom(t, nil, to.addr) }
	name := func(h *netHost) string {
		if h == nil {
			return "the test process"
		}
		return h.name
	}
	want := func(when string, from, to *netHost, ok bool) {
		t.Helper()
		got := false
		if from == nil {
			got = fromRoot(to)
		} else {
			got = reach(from, to)
		}
		if got != ok {
			t.Errorf("%s: %s connects to %s: %v, want %v", when, name(from), to.name, got, ok)
		}
	}
	for _, p := range [][2]*netHost{{a, b}, {b, a}, {c, a}, {nil, a}, {b, c}} {
		want("before the partition", p[0], p[1], true)
	}
	// Only the host's own port is touched: the address stays on its link.
	a.partition()
	for _, p := range [][2]*netHost{{a, b}, {a, c}, {b, a}, {c, a}, {nil, a}} {
		want("a partitioned", p[0], p[1], false)
	}
	want("a partitioned", b, c, true)
	want("a partitioned", nil, b, true)
	a.heal()
	for _, p := range [][2]*netHost{{a, b}, {b, a}, {c, a}, {nil, a}} {
		want("healed", p[0], p[1], true)
	}
}

// TestNetnsSeesMounts: a ctxfs server started in a host's network
// namespace (server.wrap = host.wrap()) mounts where the test process
// sees it, and a process started with startInNetns in another host's
// namespace reads through that mount, and reaches the server's socket.
// (ip netns exec would have given each its own mount namespace: the
// mount would be empty there.) The server can be paused, resumed and
// killed by its PID, which is its own, not nsenter's.
func TestNetnsSeesMounts(t *testing.T) {
	requireFUSE(t)
	tn := newTestNet(t)
	a, b := tn.addHost("a"), tn.addHost("b")
	s := newFuseServerWith(t, func(s *server) { s.wrap = a.wrap() })
	umountLeftovers(t, s.root)
	if comm := readComm(s.cmd.Process.Pid); comm != "ctxfs" {
		t.Fatalf("the server's PID runs %q, not ctxfs: nsenter did not exec it", comm)
	}
	if got := netnsOf(t, s.cmd.Process.Pid); got != netnsOfPath(t, "/run/netns/"+a.ns) {
		t.Fatalf("the server runs in network namespace %s, not host a's", got)
	}
	s.send("netns", "n-0", "hello from host a")
	msgs := filepath.Join(s.mnt(sessRel("netns")), "messages.jsonl")
	reader := exec.Command("/bin/cat", msgs)
	var out bytes.Buffer
	reader.Stdout, reader.Stderr = &out, &out
	startInNetns(t, b, reader)
	if err := reader.Wait(); err != nil || !strings.Contains(out.String(), "hello from host a") {
		t.Fatalf("a process on host b reading %s through the mount: %v %q", msgs, err, out.String())
	}
	// The socket answers callers in other namespaces (it is reached by
	// path), and a paused server answers after it resumes.
	if err := pause(s.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	reply := make(chan []frame, 1)
	go func() { frames, _ := s.request("coder", `{"op":"ping"}`); reply <- frames }()
	select {
	case f := <-reply:
		t.Errorf("a paused server answered ping: %v", f)
	case <-time.After(300 * time.Millisecond):
	}
	if err := resume(s.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-reply:
		if len(f) != 1 || f[0]["type"] != "pong" {
			t.Errorf("ping after resume: %v", f)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("no answer to ping 10 s after resume")
	}
	dead := s.crash()
	reaped(t, dead)
	if err := syscall.Kill(s.cmd.Process.Pid, 0); err != syscall.ESRCH {
		t.Errorf("the server's PID after kill -9: %v, want ESRCH", err)
	}
}

// readComm is a process's command name, "" when it is gone.
func readComm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

// netnsOf is the network namespace a process is in (its nsfs inode).
func netnsOf(t *testing.T, pid int) string {
	return netnsOfPath(t, fmt.Sprintf("/proc/%d/ns/net", pid))
}

// netnsOfPath is the inode of a network namespace file.
func netnsOfPath(t *testing.T, p string) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatalf("stat %s: %v", p, err)
	}
	return fmt.Sprint(st.Ino)
}
