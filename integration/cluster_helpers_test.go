package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ctxfs/ctxfs/cluster/ca"
	"github.com/ctxfs/ctxfs/internal/mountlife"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// A cluster of ctxfs hosts on this one machine (SPEC 19): a real etcd of
// three members, each host a `ctxfs mount --cluster` server with a root
// of its own in a network namespace of its own (testNet), all over one
// store directory, each with its own certificate of one cluster CA
// (`ctxfs cluster init` / `join`). The etcd members listen on the test
// process's port of the test network, so cutting a host's port
// (netHost.partition) cuts it from etcd and from every other host.

// clusterHost is one host of a testCluster.
type clusterHost struct {
	name  string
	net   *netHost
	srv   *server
	certs string
}

// peerAddr is where the other hosts reach it.
func (h *clusterHost) peerAddr() string { return h.net.addr + ":7443" }

// testCluster is the hosts, etcd and the store.
type testCluster struct {
	t       testing.TB
	tn      *testNet
	etcd    *testkit.Etcd
	etcdTLS bool // etcd serves https, and lets in only the cluster's hosts
	store   string
	ttl     time.Duration
	hosts   []*clusterHost
}

// clusterMade is what a testCluster is made with beyond its hosts' names.
type clusterMade struct {
	stores    []string // host i's store; nil: one local directory for all
	ttl       time.Duration
	configure func(*server) // may be nil
	etcdTLS   bool
}

// newTestCluster makes etcd, the certificates and the hosts named, with a
// writer lease of ttl; configure (may be nil) runs on each host's server
// before it starts (definitions, environment). Hosts start one after
// another, the first becoming the writer.
func newTestCluster(t testing.TB, ttl time.Duration, configure func(*server), names ...string) *testCluster {
	t.Helper()
	return newClusterWith(t, clusterMade{ttl: ttl, configure: configure}, names...)
}

// newClusterOn is newTestCluster with host i's store at stores[i] (one
// store seen through several mounts, a distributed filesystem's clients);
// nil: one local directory for all.
func newClusterOn(t testing.TB, stores []string, ttl time.Duration, configure func(*server), names ...string) *testCluster {
	t.Helper()
	return newClusterWith(t, clusterMade{stores: stores, ttl: ttl, configure: configure}, names...)
}

// newClusterWith makes the certificates (the first host's directory holds
// the CA), etcd, and the hosts named.
func newClusterWith(t testing.TB, o clusterMade, names ...string) *testCluster {
	t.Helper()
	requireFUSE(t)
	testkit.RequireEtcd(t)
	keepFusectlAsIs(t)
	base := t.TempDir()
	os.Chmod(filepath.Dir(base), 0o755)
	os.Chmod(base, 0o755)
	c := &testCluster{t: t, tn: newTestNet(t), store: filepath.Join(base, "store"), ttl: o.ttl, etcdTLS: o.etcdTLS}
	for i, name := range names {
		h := &clusterHost{name: name, net: c.tn.addHost(name), certs: filepath.Join(base, "certs-"+name)}
		c.makeCerts(h, i == 0, filepath.Join(base, "certs-"+names[0]))
		c.hosts = append(c.hosts, h)
	}
	c.startEtcd(base)
	for i, h := range c.hosts {
		h.srv = &server{t: t, root: filepath.Join(base, h.name, "ctx"), store: c.store}
		if o.stores != nil {
			h.srv.store = o.stores[i]
			// As this client sees it (a MooseFS client caches the volume
			// root's attributes: 0777 until it looks again).
			testkit.Must(t, os.Chmod(filepath.Dir(o.stores[i]), 0o755))
		}
		h.srv.define("coder", map[string]string{"model": "debug/echo"})
		h.srv.wrap = h.net.wrap()
		h.srv.args = c.args(h)
		if o.configure != nil {
			o.configure(h.srv)
		}
	}
	for _, h := range c.hosts {
		h.srv.start()
		waitMounted(t, h.srv)
		srv := h.srv
		t.Cleanup(func() { // never leave a dead connection behind
			mountlife.AbortDead(srv.mnt("home"))
			mountlife.AbortDead(srv.mnt("shared"))
		})
	}
	return c
}

// startEtcd starts three members listening on the test process's port of
// the test network (their peers talk on loopback). With etcdTLS they
// serve https with a certificate of the cluster's CA (ctxfs cluster join
// --etcd --host etcd) and require a client certificate of that CA.
func (c *testCluster) startEtcd(base string) {
	scheme, opts := "http://", testkit.EtcdOptions{Members: 3}
	if c.etcdTLS {
		scheme = "https://"
		caDir, dir := c.hosts[0].certs, filepath.Join(base, "certs-etcd")
		args := []string{"cluster", "join", "--etcd", "--ca", caDir, "--host", "etcd", "--addr", c.tn.prefix + ".1", "--out", dir}
		if out, err := runCmd(c.t, nil, nil, ctxfsBin, args...); err != nil {
			c.t.Fatalf("ctxfs %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		id, err := ca.Load(caDir)
		testkit.Must(c.t, err)
		opts.TLS = &testkit.EtcdTLS{CertFile: filepath.Join(dir, ca.HostCertFile), KeyFile: filepath.Join(dir, ca.HostKeyFile),
			CAFile: filepath.Join(caDir, ca.CACertFile), Client: id.EtcdTLS(nil)}
	}
	for range 3 {
		opts.ClientURLs = append(opts.ClientURLs, scheme+c.tn.prefix+".1:"+freePort(c.t, c.tn.prefix+".1"))
		opts.PeerURLs = append(opts.PeerURLs, "http://127.0.0.1:"+freePort(c.t, "127.0.0.1"))
	}
	c.etcd = testkit.StartEtcd(c.t, opts)
}

// etcdPut puts key in the cluster's etcd, as the first host (whoever can
// write there).
func (c *testCluster) etcdPut(key, value string) {
	c.t.Helper()
	conf := clientv3.Config{Endpoints: c.etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if c.etcdTLS {
		id, err := ca.Load(c.hosts[0].certs)
		testkit.Must(c.t, err)
		conf.TLS = id.EtcdTLS(nil)
	}
	cli, err := clientv3.New(conf)
	testkit.Must(c.t, err)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = cli.Put(ctx, key, value)
	testkit.Must(c.t, err)
}

// etcdArgs are what `ctxfs cluster status` or `revoke` reach etcd with.
func (c *testCluster) etcdArgs() []string {
	args := []string{"--cluster", strings.Join(c.etcd.Endpoints(), ",")}
	if c.etcdTLS {
		args = append(args, "--cluster-certs", c.hosts[0].certs)
	}
	return args
}

// freePort is a TCP port free on addr now.
func freePort(t testing.TB, addr string) string {
	l, err := net.Listen("tcp", addr+":0")
	testkit.Must(t, err)
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

// makeCerts makes h's certificate: the CA with it (first), or issued by
// the first host's CA.
func (c *testCluster) makeCerts(h *clusterHost, first bool, caDir string) {
	args := []string{"cluster", "init", "--dir", h.certs, "--host", h.name, "--addr", h.net.addr}
	if !first {
		args = []string{"cluster", "join", "--ca", caDir, "--host", h.name, "--addr", h.net.addr, "--out", h.certs}
	}
	if out, err := runCmd(c.t, nil, nil, ctxfsBin, args...); err != nil {
		c.t.Fatalf("ctxfs %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// args are h's cluster flags.
func (c *testCluster) args(h *clusterHost) []string {
	return []string{"--cluster", strings.Join(c.etcd.Endpoints(), ","), "--cluster-host", h.name,
		"--cluster-addr", h.peerAddr(), "--cluster-certs", h.certs, "--cluster-ttl", c.ttl.String()}
}

// status is `ctxfs cluster status` and its exit code.
func (c *testCluster) status() (string, int) {
	out, err := runCmd(c.t, nil, nil, ctxfsBin, append([]string{"cluster", "status"}, c.etcdArgs()...)...)
	return out, exitCode(c.t, err)
}

// writer is the host `ctxfs cluster status` names as the writer ("" for none).
func (c *testCluster) writer() string {
	out, _ := c.status()
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "writer: "); ok {
			return strings.Fields(rest)[0]
		}
	}
	return ""
}

// host is the host named.
func (c *testCluster) host(name string) *clusterHost {
	for _, h := range c.hosts {
		if h.name == name {
			return h
		}
	}
	c.t.Fatalf("no host %s", name)
	return nil
}

// waitWriter waits until some host other than not writes, and returns it
// once it serves: etcd names the writer as it wins its lease, before it
// has opened the store (replayed the journal, on a distributed filesystem
// a while), and its sockets answer EAGAIN until then.
func (c *testCluster) waitWriter(not string, limit time.Duration) *clusterHost {
	c.t.Helper()
	var w string
	eventually(c.t, limit, "a writer other than "+not, func() bool {
		w = c.writer()
		return w != "" && w != not
	})
	h := c.host(w)
	eventually(c.t, limit, "the writer "+w+" serving", func() bool {
		fr, _, err := h.srv.requestAsWithin(nil, "coder", `{"op":"ping"}`, time.Second)
		return err == nil && len(fr) > 0 && fr[len(fr)-1]["type"] == "pong"
	})
	return h
}

// follower is a host other than w (the writer), in a cluster of two or more.
func (c *testCluster) follower(w *clusterHost) *clusterHost {
	if c.hosts[0] == w {
		return c.hosts[1]
	}
	return c.hosts[0]
}

// faultHosts are the hosts as the fault schedules take them.
func (c *testCluster) faultHosts() []*faultHost {
	var out []*faultHost
	for _, h := range c.hosts {
		out = append(out, &faultHost{name: h.name, srv: h.srv, net: h.net})
	}
	return out
}
