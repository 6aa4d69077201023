package main

import (
	"context"
	"fmt"
	ctxfs "github.com/ctxfs/ctxfs/fs"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"golang.org/x/sys/unix"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/cluster/ca"
	"github.com/ctxfs/ctxfs/cluster/host"
	"github.com/ctxfs/ctxfs/cluster/lease"
	"github.com/ctxfs/ctxfs/cluster/replica"
	"github.com/ctxfs/ctxfs/server"
	"github.com/ctxfs/ctxfs/session"
)

// clusterConfig is what `ctxfs mount --cluster` was asked.
type clusterConfig struct {
	endpoints string        // etcd's client URLs, comma-separated; "" = a single host
	host      string        // this host's name in the cluster
	addr      string        // where the other hosts reach this one (host:port)
	certs     string        // this host's certificate directory (ctxfs cluster init/join)
	ttl       time.Duration // the writer's lease
	name      string        // the store's name in etcd
}

// defaultCerts is where `ctxfs cluster init`/`join` put a host's certificate.
const defaultCerts = "/etc/ctxfs/cluster"

func (c *clusterConfig) addFlags(f *pflag.FlagSet) {
	f.StringVar(&c.endpoints, "cluster", "", "serve the store as one host of a cluster coordinated through etcd at these `ENDPOINTS` (comma-separated client URLs)")
	f.StringVar(&c.host, "cluster-host", "", "this host's `NAME` in the cluster (default: the host name; must match its certificate)")
	f.StringVar(&c.addr, "cluster-addr", "", "`HOST:PORT` where the other hosts reach this one (required with --cluster)")
	f.StringVar(&c.certs, "cluster-certs", defaultCerts, "this host's certificate `DIR` (ctxfs cluster init / join)")
	f.StringVar(&c.name, "cluster-name", "ctxfs", "the store's `NAME` in etcd (every host of a store gives the same; each store its own)")
	f.DurationVar(&c.ttl, "cluster-ttl", lease.DefaultTTL, "the writer's lease `DURATION`: a dead writer is replaced after about this long")
}

func (c *clusterConfig) on() bool { return c.endpoints != "" }

// check fills in the host name and refuses what cannot work.
func (c *clusterConfig) check() error {
	if !c.on() {
		return nil
	}
	if c.addr == "" {
		return usageError("--cluster needs --cluster-addr HOST:PORT (where the other hosts reach this one)")
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
		"--cluster-certs", c.certs, "--cluster-ttl", c.ttl.String(), "--cluster-name", c.name}
}

// clusterPrefix is the store's place in etcd. One etcd may coordinate
// several stores, each under a name of its own (--cluster-name); names are
// the operator's, like the endpoints: a store's hosts must all give the same.
func clusterPrefix(name string) string { return "/ctxfs/" + name + "/" }

// clusterRole is this process as a host of a cluster: the mounts serve
// its switch (the replica, or the engine while it writes).
type clusterRole struct {
	member  *lease.Member
	replica *replica.Replica
	sw      *replica.Switch
	id      *ca.Identity
	base    session.Config
	c       clusterConfig
	log     *slog.Logger
	h       *host.Host
	cancel  context.CancelFunc
}

// joinCluster joins etcd and opens the follower's view; the host campaigns
// once its mounts and sockets are up (run).
func joinCluster(c clusterConfig, cfg session.Config, log *slog.Logger) (*clusterRole, error) {
	id, err := ca.Load(c.certs)
	if err != nil {
		return nil, err
	}
	prefix := clusterPrefix(c.name)
	rep, err := replica.Open(cfg.Store, cfg.Root, log)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := lease.Join(ctx, lease.Config{
		Endpoints: strings.Split(c.endpoints, ","), Prefix: prefix,
		Host: c.host, Addr: c.addr, TTL: c.ttl, Log: log,
	})
	if err != nil {
		rep.Close()
		return nil, fmt.Errorf("cluster: join %s: %w", c.endpoints, err)
	}
	log.Info("cluster: joined", "host", c.host, "addr", c.addr, "prefix", prefix, "ttl", c.ttl.String())
	return &clusterRole{member: m, replica: rep, sw: replica.NewSwitch(rep), id: id, base: cfg, c: c, log: log}, nil
}

// run starts the host: it follows, then campaigns in the background.
func (r *clusterRole) run(socks *server.Sockets) error {
	h, err := host.Start(host.Config{
		Engine: r.base, Member: r.member, Identity: r.id, Listen: r.c.addr,
		Replica: r.replica, Switch: r.sw, Sockets: socks, Log: r.log,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.h, r.cancel = h, cancel
	go h.Run(ctx)
	return nil
}

// drainPatience bounds the hand-over at a stop (ctxfs umount waits 10 s).
const drainPatience = 8 * time.Second

// drain hands the store over when this host writes, and stops the host.
func (r *clusterRole) drain() {
	if r.h != nil {
		r.cancel()
		select {
		case <-r.h.Stopped():
		case <-time.After(drainPatience):
			r.log.Warn("cluster: the hand-over did not finish; the lease will expire instead")
		}
		r.h.Close()
	}
}

// serving is what serves the mounts and the sockets: one engine (a single
// host), or a host of a cluster (its switch; the sockets get the engine
// while it writes).
type serving interface {
	mountEngine() ctxfs.Engine
	socketEngine() *session.Engine // nil: the sockets start without one
	start(socks *server.Sockets) error
	drain() // a writer hands its store over (before the sockets and mounts go)
	close()
}

// openServing opens the store for serving: the engine, or the cluster.
func (c *mountConfig) openServing(cfg session.Config, st *storefs.Root, log *slog.Logger) (serving, error) {
	if c.cluster.on() {
		return joinCluster(c.cluster, cfg, log)
	}
	opening := time.Now()
	e, err := session.Open(cfg)
	if err != nil {
		return nil, err
	}
	log.Info("store opened", "store", cfg.Store, "took", time.Since(opening).Round(time.Millisecond).String())
	// What the store's filesystem gives (storefs.Ways), said and recorded
	// once the store is known good: a refused start writes nothing.
	log.Info("store ways", "ways", st.Ways().String())
	if err := st.RecordWays(); err != nil {
		log.Warn("store ways not recorded for fsck and doctor", "err", err)
	}
	return single{e}, nil
}

// single is the one engine of a single host.
type single struct{ e *session.Engine }

func (s single) mountEngine() ctxfs.Engine               { return s.e }
func (s single) socketEngine() *session.Engine           { return s.e }
func (s single) start(*server.Sockets) error             { return nil }
func (s single) drain()                                  {}
func (s single) close()                                  { s.e.Close() }
func (r *clusterRole) mountEngine() ctxfs.Engine         { return r.sw }
func (r *clusterRole) socketEngine() *session.Engine     { return nil }
func (r *clusterRole) start(socks *server.Sockets) error { return r.run(socks) }
func (r *clusterRole) close()                            { r.member.Close(); r.replica.Close() }

// lockStore takes the store lock: a single host's alone (lockStore), or,
// for a host of a cluster, a shared flock: the hosts share the store, and
// a single-host server (which wants it alone) is kept out while any host
// serves it. Who writes is etcd's to say (cluster/lease), not the lock's.
func (c *mountConfig) lockStore(st *storefs.Root, root string) (*os.File, error) {
	if !c.cluster.on() {
		return lockStore(st, root)
	}
	l, err := openStoreLock(st)
	if err != nil {
		return nil, err
	}
	if err := refuseSingleServed(st); err != nil {
		l.Close()
		return nil, err
	}
	if err := unix.Flock(int(l.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		l.Close()
		return nil, refuseSingleServed(st)
	}
	return l, nil
}

// refuseSingleServed refuses, for a host of a cluster, a store that a
// single-host server holds alone (the lock is only tried).
func refuseSingleServed(st *storefs.Root) error {
	l, err := openStoreLock(st)
	if err != nil {
		return err
	}
	defer l.Close()
	if unix.Flock(int(l.Fd()), unix.LOCK_SH|unix.LOCK_NB) != nil {
		return fmt.Errorf("store %s is served by a single-host ctxfs; ctxfs umount it first", st.Path())
	}
	return nil
}
