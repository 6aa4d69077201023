package testkit

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// NetNS is a network namespace a test made (`ip netns add`), linked to the
// test's own by a veth pair with a /30 of the test's own: a host of a
// cluster, or a server (MooseFS's master, an etcd member), that the test
// can reach and can cut off. It is deleted in t.Cleanup, after every
// cleanup registered later (the processes in it) has run.
type NetNS struct {
	Name     string // for `ip netns exec NAME` and `ip -n NAME`
	Path     string // /run/netns/NAME, for `nsenter --net=PATH`
	HostAddr string // the test's end of the link
	NSAddr   string // the namespace's end
	HostLink string // the veth end in the test's namespace
}

// netnsSeq numbers the namespaces of one test binary.
var netnsSeq atomic.Int32

// MakeNetNS makes a namespace named for tag (a few letters) and links it.
// It needs root and ip (iproute2); the test fails without them.
func MakeNetNS(t testing.TB, tag string) *NetNS {
	t.Helper()
	n := int(netnsSeq.Add(1))
	id := NetNSID(n)
	host, ns := freeSubnet(os.Getpid(), n)
	nn := &NetNS{Name: "ctxfs-" + tag + "-" + id, HostAddr: host, NSAddr: ns, HostLink: "ch" + id}
	nn.Path = "/run/netns/" + nn.Name
	peer := "cn" + id
	t.Cleanup(func() {
		ipRun("netns", "del", nn.Name)
		ipRun("link", "del", nn.HostLink) // gone with the namespace, unless the move failed
	})
	for _, args := range [][]string{
		{"netns", "add", nn.Name},
		{"link", "add", nn.HostLink, "type", "veth", "peer", "name", peer},
		{"link", "set", peer, "netns", nn.Name},
		{"addr", "add", host + "/30", "dev", nn.HostLink},
		{"link", "set", nn.HostLink, "up"},
		{"-n", nn.Name, "addr", "add", ns + "/30", "dev", peer},
		{"-n", nn.Name, "link", "set", peer, "up"},
		{"-n", nn.Name, "link", "set", "lo", "up"},
	} {
		if out, err := ipRun(args...); err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
	}
	return nn
}

// NetNSID is the id of this test binary's namespace n: its PID (whole, so
// that RemoveDeadNetNS can tell whether the binary still runs) and n.
// Interface names carry it too: "ctn"+id is at most 15 bytes for a PID
// below pid_max's ceiling (2^22) and n below 10000.
func NetNSID(n int) string { return fmt.Sprintf("%d-%d", os.Getpid(), n) }

// netnsOfRun matches the names NetNSID makes, MakeNetNS's
// (ctxfs-TAG-ID) and the integration tests' networks'
// (ctxfs-net-ID-HOST); its group is the PID of the binary that made it.
var netnsOfRun = regexp.MustCompile(`^ctxfs-[a-z]+-([0-9]+)-[0-9]+(-[A-Za-z0-9_.]+)?$`)

// RemoveDeadNetNS deletes the network namespaces of test binaries that no
// longer run (their veths go with them, and the processes still in them
// are killed), and returns their names: a
// binary killed by CI, or panicking on go test's -timeout, runs no
// t.Cleanup and leaves them. A namespace is a dead run's when its name is
// one NetNSID makes and no process has the PID it carries: a running
// binary's, this one's or another's, are left alone (a PID reused since
// only keeps a leftover). Nothing without root.
func RemoveDeadNetNS() []string {
	if os.Geteuid() != 0 {
		return nil
	}
	entries, _ := os.ReadDir("/run/netns")
	var removed []string
	for _, e := range entries {
		if !OfEndedRun(netnsOfRun, e.Name()) {
			continue
		}
		killIn(e.Name())
		if _, err := ipRun("netns", "del", e.Name()); err == nil {
			removed = append(removed, e.Name())
		}
	}
	return removed
}

// killIn SIGKILLs the processes in network namespace ns: a dead run's
// (it made the namespace), which its death signal did not reach, such as
// GlusterFS's brick, which glusterd starts as a daemon of its own. Without
// it, the namespace lives on with them once its name is deleted.
func killIn(ns string) {
	out, _ := ipRun("netns", "pids", ns)
	for _, f := range strings.Fields(out) {
		if pid, err := strconv.Atoi(f); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// OfEndedRun reports whether name is a leftover's name of a test binary
// that no longer runs: it matches ofRun, whose first group is the PID of
// the binary that made it, and no process has that PID any more (a PID
// reused since only keeps the leftover).
func OfEndedRun(ofRun *regexp.Regexp, name string) bool {
	m := ofRun.FindStringSubmatch(name)
	if m == nil {
		return false
	}
	_, err := os.Stat("/proc/" + m[1])
	return errors.Is(err, fs.ErrNotExist)
}

// EndedPID is the PID of a process that has ended: a leftover's name
// carrying it is a dead run's (for the tests of the sweeps).
func EndedPID(t testing.TB) int {
	cmd := exec.Command("true")
	Must(t, cmd.Run())
	return cmd.Process.Pid
}

// freeSubnet picks the /30 of namespace n of this process in
// 10.213.0.0/16 (private, and unlikely to be any network of this
// machine's), skipping a block an interface here already uses: the
// test's end, then the namespace's.
func freeSubnet(pid, n int) (host, ns string) {
	used, _ := exec.Command("ip", "-br", "addr").Output()
	for try := 0; ; try++ {
		block := ((pid*31 + n + try*7919) % 16384) * 4
		host = fmt.Sprintf("10.213.%d.%d", block/256, block%256+1)
		ns = fmt.Sprintf("10.213.%d.%d", block/256, block%256+2)
		if !strings.Contains(string(used), host+"/") && !strings.Contains(string(used), ns+"/") || try > 100 {
			return host, ns
		}
	}
}

// ipRun runs ip with a deadline and returns its output.
func ipRun(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	return string(out), err
}
