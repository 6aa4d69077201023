package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/cluster/ca"
	"github.com/ctxfs/ctxfs/cluster/engswitch"
	"github.com/ctxfs/ctxfs/cluster/host"
	"github.com/ctxfs/ctxfs/cluster/lease"
	"github.com/ctxfs/ctxfs/cluster/replica"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/server"
)

// clusterConfig is what `ctxfs mount --cluster` was asked.
type clusterConfig struct {
	etcdFlags               // etcd's client URLs ("" = a single host), this host's certificate directory (ctxfs cluster init/join), etcd's CA
	host      string        // this host's name in the cluster
	addr      string        // where the other hosts reach this one (host:port)
	ttl       time.Duration // the writer's lease
	name      string        // the store's name in etcd
}

func (c *clusterConfig) addFlags(f *pflag.FlagSet) {
	f.StringVar(&c.endpoints, "cluster", "", "serve the store as one host of a cluster coordinated through etcd at these `ENDPOINTS` (comma-separated client URLs)")
	f.StringVar(&c.host, "cluster-host", "", "this host's `NAME` in the cluster (default: the host name; must match its certificate)")
	f.StringVar(&c.addr, "cluster-addr", "", "`HOST:PORT` where the other hosts reach this one (required with --cluster)")
	c.addTLSFlags(f, "this host's certificate `DIR` (ctxfs cluster init / join); with https endpoints, also what it shows etcd")
	f.StringVar(&c.name, "cluster-name", "ctxfs", "the store's `NAME` in etcd (every host of a store gives the same; each store its own)")
	f.DurationVar(&c.ttl, "cluster-ttl", lease.DefaultTTL, "the writer's lease `DURATION`: a dead writer is replaced after about this long")
}

func (c *clusterConfig) on() bool { return c.endpoints != "" }

// check fills in the host name and refuses what cannot work. A host of a
// cluster writes nothing in the store outside its term, its log included:
// it needs a log elsewhere (logElsewhere: --foreground or --log-file).
func (c *clusterConfig) check(follow, logElsewhere bool) error {
	if !c.on() {
		return nil
	}
	if follow {
		return usageError("--follow and --cluster: a cluster's host follows by itself while another writes")
	}
	if !logElsewhere {
		return usageError("--cluster writes nothing in the store outside its term, its log included: give --log-file or --foreground")
	}
	if c.addr == "" {
		return usageError("--cluster needs --cluster-addr HOST:PORT (where the other hosts reach this one)")
	}
	if _, err := c.https(); err != nil {
		return err
	}
	if c.ttl < 2*time.Second {
		return usageError(fmt.Sprintf("--cluster-ttl %v: want 2s or more", c.ttl))
	}
	if !abi.ValidName(c.name) {
		return usageError(fmt.Sprintf("--cluster-name %q: want a plain name (letters, digits, - _ .)", c.name))
	}
	if c.host == "" {
		h, err := os.Hostname()
		if err != nil {
			return err
		}
		c.host = h
	}
	return nil
}

func (c *clusterConfig) args() []string {
	if !c.on() {
		return nil
	}
	return []string{"--cluster", c.endpoints, "--cluster-host", c.host, "--cluster-addr", c.addr,
		"--cluster-certs", c.certs, "--etcd-ca", c.etcdCA, "--cluster-ttl", c.ttl.String(), "--cluster-name", c.name}
}

// clusterPrefix is the store's place in etcd. One etcd may coordinate
// several stores, each under a name of its own (--cluster-name); names are
// the operator's, like the endpoints: a store's hosts must all give the same.
func clusterPrefix(name string) string { return "/ctxfs/" + name + "/" }

// joinCluster makes this process a host of a cluster: it joins etcd and
// opens the follower's view, which the mounts serve through a switch; once
// the sockets are up (start) the host campaigns, and writes while its term
// lasts (cluster/host). The engine it opens then is configured as a single
// host's (engineConfig), with the term's token and gate.
func joinCluster(c clusterConfig, store, root string, log *slog.Logger) (*serving, error) {
	cfg, err := engineConfig(os.Getenv, store, root)
	if err != nil {
		return nil, err
	}
	cfg.Log = log
	id, err := ca.Load(c.certs)
	if err != nil {
		return nil, err
	}
	if id.Host != c.host {
		return nil, usageError(fmt.Sprintf("--cluster-host %s: the certificate in %s is host %s's", c.host, c.certs, id.Host))
	}
	etcdTLS, err := c.tlsFor(id)
	if err != nil {
		return nil, err
	}
	rep, err := replica.Open(store, root, log)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := lease.Join(ctx, lease.Config{
		Endpoints: c.list(), Prefix: clusterPrefix(c.name),
		Host: c.host, Addr: c.addr, TTL: c.ttl, TLS: etcdTLS, Log: log,
	})
	if err != nil {
		rep.Close()
		return nil, fmt.Errorf("cluster: join %s: %w", c.endpoints, err)
	}
	log.Info("cluster: joined", "host", c.host, "addr", c.addr, "name", c.name, "ttl", c.ttl.String())
	sw := engswitch.New(rep)
	var h *host.Host
	stop := func() {}
	start := func(socks *server.Sockets) error {
		socks.SetRelayQuota(rep.Limits().Conns)
		var err error
		h, err = host.Start(host.Config{
			Engine: cfg, Member: m, Identity: id, Listen: c.addr,
			Replica: rep, Switch: sw, Sockets: socks, Log: log,
		})
		if err != nil {
			return err
		}
		ctx, cancel := context.WithCancel(context.Background())
		stop = cancel
		go h.Run(ctx)
		return nil
	}
	drain := func() {
		if h == nil {
			return
		}
		stop()
		select {
		case <-h.Stopped():
		case <-time.After(drainPatience):
			log.Warn("cluster: the hand-over did not finish; the lease will expire instead")
		}
		h.Close()
	}
	return &serving{mount: sw, sockets: true, start: start, drain: drain,
		close: func() { m.Close(); rep.Close() }}, nil
}

// drainPatience bounds the hand-over at a stop (ctxfs umount waits 10 s).
const drainPatience = 8 * time.Second

// lockStoreShared takes the store lock of a host of a cluster: a shared
// flock, held with the other hosts, that keeps a single-host server
// (which wants it alone) out while any host serves the store. Who writes
// is etcd's to say (cluster/lease), not the lock's.
func lockStoreShared(st *storefs.Root) (*os.File, error) {
	l, err := openStoreLock(st)
	if err != nil {
		return nil, err
	}
	if unix.Flock(int(l.Fd()), unix.LOCK_SH|unix.LOCK_NB) != nil {
		l.Close()
		return nil, singleServedError(st)
	}
	return l, nil
}

// refuseSingleServed refuses, for a host of a cluster, a store that a
// single-host server holds alone (the lock is only tried).
func refuseSingleServed(st *storefs.Root) error {
	l, err := lockStoreShared(st)
	if err != nil {
		return err
	}
	return l.Close()
}

func singleServedError(st *storefs.Root) error {
	return fmt.Errorf("store %s is served by a single-host ctxfs; ctxfs umount it first", st.Path())
}
