package integration

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// A test network of several "hosts" on this one machine, for the tests of
// several hosts over one store (SPEC 19): a switch (a network namespace
// holding a bridge) and, per named host, a network namespace with a veth
// into the switch and an address of the test's own in 10.214.0.0/16 (the
// MooseFS test cluster uses 10.213/16). The test process joins too, on a
// port of its own: it reaches every host (an etcd, a peer's TLS port), and
// a partitioned host is cut from it as from every other host.
//
// A host's processes run in its network namespace ONLY (startInNetns,
// netHost.wrap: nsenter --net), never with ip netns exec, which also
// unshares the mount namespace and would hide the FUSE mounts: a server
// started in a host's namespace mounts where the test and every other host
// see it, and its Unix sockets (reached by path) answer callers from any
// namespace. Everything is removed in t.Cleanup, on failure too; names
// carry the test binary's PID and a counter, so a crashed earlier run's
// leftovers never collide with this one's, and the next run's TestMain
// removes them (testkit.RemoveDeadNetNS).

// testNet is one test network.
type testNet struct {
	t      testing.TB
	id     string // unique on this machine: PID and counter
	sw     string // the switch's network namespace, with bridge br0
	prefix string // "10.214.B": the network is PREFIX.0/24
	rootIf string // the test process's port, in the root namespace
	hosts  map[string]*netHost
}

// netHost is one host of a testNet.
type netHost struct {
	name string
	ns   string // its network namespace (/run/netns/NS)
	addr string // its address on the test network
	port string // its port on the switch's bridge (in the switch namespace)
	net  *testNet
}

// netSeq numbers the networks of one test binary.
var netSeq atomic.Int32

// nextNetID is a new network's id, unique on this machine (the test
// binary's PID and a counter: testkit.RemoveDeadNetNS removes it once the
// binary is gone), and its counter.
func nextNetID() (id string, n int) {
	n = int(netSeq.Add(1))
	return testkit.NetNSID(n), n
}

// netAddrPrefix is the /16 the test networks take their /24s from.
const netAddrPrefix = "10.214"

// newTestNet makes a switch, and the test process's port on it at
// PREFIX.1; hosts are added with addHost.
func newTestNet(t testing.TB) *testNet {
	t.Helper()
	requireNetns(t)
	id, n := nextNetID()
	// A /24 no interface here has an address in yet.
	net := unusedAddrs(func(try int) []string {
		return []string{fmt.Sprintf("%s.%d.", netAddrPrefix, (os.Getpid()*31+n+try*7919)%256)}
	})[0]
	tn := &testNet{t: t, id: id, sw: "ctxfs-net-" + id + "-sw", rootIf: "ctn" + id,
		prefix: strings.TrimSuffix(net, "."), hosts: map[string]*netHost{}}
	t.Cleanup(tn.remove)
	tn.ip("netns", "add", tn.sw)
	tn.ip("-n", tn.sw, "link", "add", "br0", "type", "bridge")
	tn.ip("-n", tn.sw, "link", "set", "br0", "up")
	tn.ip("link", "add", tn.rootIf, "type", "veth", "peer", "name", "p-root", "netns", tn.sw)
	tn.ip("-n", tn.sw, "link", "set", "p-root", "master", "br0", "up")
	tn.ip("addr", "add", tn.prefix+".1/24", "dev", tn.rootIf)
	tn.ip("link", "set", tn.rootIf, "up")
	return tn
}

// requireNetns skips a test without root or ip/nsenter (it needs
// network namespaces).
func requireNetns(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("not root: network namespaces need CAP_SYS_ADMIN")
	}
	for _, bin := range []string{"ip", "nsenter"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s missing (iproute2, util-linux)", bin)
		}
	}
}

// addHost makes host name (at most 10 bytes: its switch port is
// "p-NAME", an interface name of at most 15) at the next address,
// PREFIX.10, PREFIX.11, …
func (tn *testNet) addHost(name string) *netHost {
	tn.t.Helper()
	if len(name) > 10 || tn.hosts[name] != nil || name == "root" {
		tn.t.Fatalf("host name %q: taken, reserved or longer than 10 bytes", name)
	}
	h := &netHost{name: name, ns: "ctxfs-net-" + tn.id + "-" + name, port: "p-" + name,
		addr: fmt.Sprintf("%s.%d", tn.prefix, 10+len(tn.hosts)), net: tn}
	tn.hosts[name] = h
	tn.ip("netns", "add", h.ns)
	// Made in the switch with its peer in the host: no name of the root
	// namespace is taken.
	tn.ip("-n", tn.sw, "link", "add", h.port, "type", "veth", "peer", "name", "eth0", "netns", h.ns)
	tn.ip("-n", tn.sw, "link", "set", h.port, "master", "br0", "up")
	tn.ip("-n", h.ns, "addr", "add", h.addr+"/24", "dev", "eth0")
	tn.ip("-n", h.ns, "link", "set", "eth0", "up")
	tn.ip("-n", h.ns, "link", "set", "lo", "up")
	return h
}

// ip runs one ip command of the set-up, failing the test when it fails.
func (tn *testNet) ip(args ...string) {
	tn.t.Helper()
	if out, err := runBounded(tn.t, "ip", args...); err != nil {
		tn.t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// remove deletes the hosts' namespaces (their veths go with them), the
// switch's and the test process's port.
func (tn *testNet) remove() {
	for _, h := range tn.hosts {
		runBounded(tn.t, "ip", "netns", "del", h.ns)
	}
	runBounded(tn.t, "ip", "netns", "del", tn.sw)
	runBounded(tn.t, "ip", "link", "del", tn.rootIf) // gone with the switch, unless the move failed
}

// partition cuts h off from every other host and from the test process:
// its switch port leaves the bridge. Its own link stays up (no carrier
// change it could notice): what it sends is dropped without an error, as
// by a cable cut somewhere in the network.
func (h *netHost) partition() {
	h.net.t.Helper()
	h.net.ip("-n", h.net.sw, "link", "set", h.port, "nomaster")
}

// heal joins h to the network again.
func (h *netHost) heal() {
	h.net.t.Helper()
	h.net.ip("-n", h.net.sw, "link", "set", h.port, "master", "br0")
}

// wrap is the command prefix that runs a program in h's network
// namespace only (server.wrap takes it: a ctxfs server on host h).
// nsenter execs the program: its PID is the program's.
func (h *netHost) wrap() []string {
	return []string{"nsenter", "--net=/run/netns/" + h.ns, "--"}
}

// startInNetns starts cmd (made by exec.Command, not started) in h's
// network namespace only, and SIGKILLs it by PID in t.Cleanup. Its PID,
// cmd.Process.Pid, is the program's own (for pause, resume and kill9).
func startInNetns(t testing.TB, h *netHost, cmd *exec.Cmd) {
	t.Helper()
	if cmd.Err != nil {
		t.Fatalf("%v", cmd.Err)
	}
	nsenter, err := exec.LookPath("nsenter")
	testkit.Must(t, err)
	cmd.Args = append(append(h.wrap(), cmd.Path), cmd.Args[1:]...)
	cmd.Path = nsenter
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = testkit.ChildAttr()
	}
	// Pdeathsig outlives nsenter's exec: the program dies with the binary.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	testkit.Must(t, cmd.Start())
	t.Cleanup(func() { kill9(cmd) })
}

// pause stops a process with SIGSTOP (a host that hangs: a long GC, a
// stalled VM) and returns once every thread of it has stopped (kill
// returns before: a thread may still answer a request meanwhile);
// resume continues it.
func pause(pid int) error {
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return err
	}
	for deadline := time.Now().Add(5 * time.Second); !testkit.AllStopped(pid); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d: a thread still runs 5 s after SIGSTOP", pid)
		}
	}
	return nil
}

func resume(pid int) error { return syscall.Kill(pid, syscall.SIGCONT) }

// kill9 SIGKILLs a started process by its PID and reaps it (bounded: a
// process stuck in the kernel is left to its own reaper).
func kill9(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	cmd.Process.Kill()
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

// unusedAddrs returns the first of the candidate address sets (try 0, 1,
// …) none of which is part of an address an interface of this machine
// has (a prefix "10.214.7." stands for its whole /24); after 100 tries,
// the last.
func unusedAddrs(candidate func(try int) []string) []string {
	used, _ := exec.Command("ip", "-br", "addr").Output()
	for try := 0; ; try++ {
		addrs := candidate(try)
		free := true
		for _, a := range addrs {
			free = free && !strings.Contains(string(used), a)
		}
		if free || try > 100 {
			return addrs
		}
	}
}
