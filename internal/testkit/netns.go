package testkit

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
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
	id := fmt.Sprintf("%d-%d", os.Getpid()%100000, n)
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
