// Package lease owns the etcd keys of one store's cluster: which hosts are
// there (Prefix+"hosts/"+name, each under a lease of its own, kept alive
// while the host runs) and which host is the store's one writer
// (Prefix+"writer", under the writer's lease). A host joins (Join),
// campaigns to become the writer (Campaign) and, as writer, holds a Term:
// a fencing token (the writer key's create revision, which grows with every
// new writer) and a local deadline before which etcd cannot have expired
// its lease (Term.Valid; the bound is on Term.Valid).
//
// It must never touch the store, the engine, FUSE or a socket, and decides
// no rule of the engine: what a writer may do with a valid term, and what a
// follower does with the writer's address, is its callers' business. Every
// etcd call is bounded in time: when etcd cannot be reached (or has no
// quorum) calls fail with an error wrapping syscall.EAGAIN, never hang.
package lease

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Config says which etcd, which store's cluster and which host. Zero
// TTL, Drift, Margin and Log take their defaults.
type Config struct {
	Endpoints []string
	Prefix    string        // key prefix of this store's cluster, e.g. "/ctxfs/<store id>/"
	Host      string        // this host's name (unique in the cluster)
	Addr      string        // where other hosts reach this one (host:port), published for forwarding
	TTL       time.Duration // the writer lease's TTL (whole seconds in etcd); default 5s
	Drift     float64       // bound on the clock-rate difference between this host and etcd's leader; default 0.01
	Margin    time.Duration // extra safety before expiry; default TTL/10
	TLS       *tls.Config   // for etcd, optional
	Log       *slog.Logger  // default slog.Default()
}

// Defaults of Config.
const (
	DefaultTTL   = 5 * time.Second
	DefaultDrift = 0.01
)

// dialTimeout bounds Join's first exchange with etcd: an unreachable etcd
// is EAGAIN after it, not a hang.
const dialTimeout = 2 * time.Second

// withDefaults fills the zero fields and checks the rest (EINVAL).
func (cfg Config) withDefaults() (Config, error) {
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Drift == 0 {
		cfg.Drift = DefaultDrift
	}
	if cfg.Margin == 0 {
		cfg.Margin = cfg.TTL / 10
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	bad := func(format string, args ...any) (Config, error) {
		return cfg, abi.Errorf(syscall.EINVAL, "lease config", format, args...)
	}
	switch {
	case len(cfg.Endpoints) == 0:
		return bad("no etcd endpoints")
	case !strings.HasPrefix(cfg.Prefix, "/") || !strings.HasSuffix(cfg.Prefix, "/"):
		return bad("prefix %q must start and end with /", cfg.Prefix)
	case cfg.Host == "" || strings.ContainsAny(cfg.Host, "/\x00"):
		return bad("host name %q must be non-empty, without / or NUL", cfg.Host)
	case cfg.TTL < time.Second:
		return bad("TTL %v is under etcd's 1 s", cfg.TTL)
	case cfg.Drift < 0 || cfg.Drift >= 0.5:
		return bad("drift %v is outside [0, 0.5)", cfg.Drift)
	case cfg.Margin < 0 || cfg.window() < cfg.TTL/2:
		// Renewals come every TTL/3: a window under TTL/2 leaves no room
		// for one failed renewal.
		return bad("margin %v leaves %v of a %v TTL to act in (at least half is needed)", cfg.Margin, cfg.window(), cfg.TTL)
	}
	return cfg, nil
}

// window is how long after a renewal's send this host may act:
// TTL·(1−Drift) − Margin (see Term.Valid).
func (cfg Config) window() time.Duration {
	return time.Duration(float64(cfg.TTL)*(1-cfg.Drift)) - cfg.Margin
}

// callTimeout bounds one etcd request other than a keepalive.
func (cfg Config) callTimeout() time.Duration {
	return max(cfg.TTL/2, time.Second)
}

// ttlSeconds is the TTL etcd is asked for: whole seconds, rounded up (the
// deadline is reckoned from the configured TTL, never the rounded one).
func ttlSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// Member is this host in the cluster: its etcd client and its host key.
type Member struct {
	cfg      Config
	client   *clientv3.Client
	log      *slog.Logger
	stopHost context.CancelFunc // ends keepHost
	hostDone chan struct{}      // closed when keepHost has returned

	mu        sync.Mutex // guards hostLease, crl, term, closed
	hostLease clientv3.LeaseID
	crl       string    // the number of the revocation list this host holds ("" none), in its host key
	started   time.Time // when the host key was last registered
	term      *Term     // the term this host holds, ended by Close
	closed    bool
}

// hostValue is the value of Prefix+"hosts/"+name.
type hostValue struct {
	Addr    string    `json:"addr"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
	CRL     string    `json:"crl,omitempty"` // the revocation list's number it holds
}

func (m *Member) hostKey() string     { return m.cfg.Prefix + "hosts/" + m.cfg.Host }
func (m *Member) hostsPrefix() string { return m.cfg.Prefix + "hosts/" }
func (m *Member) writerKey() string   { return m.cfg.Prefix + "writer" }

// Join connects to etcd and registers this host (its key under a lease of
// its own, kept alive, and registered again should etcd lose it). It fails
// within a bounded time with an error wrapping syscall.EAGAIN when etcd
// cannot be reached or has no quorum. A host key left by an earlier run of
// the same host name is replaced.
func Join(ctx context.Context, cfg Config) (*Member, error) {
	m, err := connect(cfg)
	if err != nil {
		return nil, err
	}
	jctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	if err := m.register(jctx); err != nil {
		m.client.Close()
		return nil, callError(ctx, "join", err)
	}
	hctx, stop := context.WithCancel(context.Background())
	m.stopHost = stop
	go m.keepHost(hctx)
	return m, nil
}

// Observe connects to etcd without joining: a Member for Status and
// Writer alone (`ctxfs cluster status`), which registers nothing and never
// campaigns. cfg.Host may be empty.
func Observe(cfg Config) (*Member, error) {
	if cfg.Host == "" {
		cfg.Host = "observer"
	}
	m, err := connect(cfg)
	if err != nil {
		return nil, err
	}
	m.stopHost = func() {}
	close(m.hostDone)
	return m, nil
}

// connect makes a Member's etcd client.
func connect(cfg Config) (*Member, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: dialTimeout,
		// A member that stops answering (SIGSTOP, a cut link) is noticed
		// by gRPC's keepalive, and its connection is dropped from the
		// balancer, instead of holding requests until their timeouts.
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
		TLS:                  cfg.TLS,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return nil, unavailable("join", err)
	}
	return &Member{cfg: cfg, client: client, log: cfg.Log.With("host", cfg.Host), hostDone: make(chan struct{})}, nil
}

// register puts the host key under a new lease.
func (m *Member) register(ctx context.Context) error {
	grant, err := m.client.Grant(clientv3.WithRequireLeader(ctx), ttlSeconds(m.cfg.TTL))
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.started = time.Now().UTC()
	m.mu.Unlock()
	if err := m.putHost(ctx, grant.ID); err != nil {
		m.revokeSoon(grant.ID)
		return err
	}
	m.mu.Lock()
	m.hostLease = grant.ID
	m.mu.Unlock()
	return nil
}

// putHost puts the host key's value under lease id.
func (m *Member) putHost(ctx context.Context, id clientv3.LeaseID) error {
	m.mu.Lock()
	value, _ := json.Marshal(hostValue{Addr: m.cfg.Addr, PID: os.Getpid(), Started: m.started, CRL: m.crl})
	m.mu.Unlock()
	_, err := m.client.Put(clientv3.WithRequireLeader(ctx), m.hostKey(), string(value), clientv3.WithLease(id))
	return err
}

// SetCRL says in this host's key which revocation list it holds (its
// number), for ctxfs cluster status: an admin sees which hosts have
// adopted a new list. Bounded; a failure is the next registration's to
// mend (the number is kept and put with it).
func (m *Member) SetCRL(ctx context.Context, number string) error {
	m.mu.Lock()
	m.crl = number
	id := m.hostLease
	m.mu.Unlock()
	bctx, cancel := m.bounded(ctx)
	defer cancel()
	if err := m.putHost(bctx, id); err != nil {
		return callError(ctx, "host key", err)
	}
	return nil
}

// keepHost keeps the host lease alive; when etcd drops it (expired during
// an outage) it registers the host again, every TTL/3 until it can.
func (m *Member) keepHost(ctx context.Context) {
	defer close(m.hostDone)
	for {
		m.mu.Lock()
		id := m.hostLease
		m.mu.Unlock()
		if responses, err := m.client.KeepAlive(ctx, id); err == nil {
			for range responses {
			}
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(m.cfg.TTL / 3):
			}
			rctx, cancel := context.WithTimeout(ctx, m.cfg.callTimeout())
			err := m.register(rctx)
			cancel()
			if err == nil {
				m.log.Info("lease: host registered again", "key", m.hostKey())
				break
			}
		}
	}
}

// Close leaves the cluster: it ends this host's term, if any, at once
// (without resigning: the writer's lease then expires by its TTL; Resign
// first to hand over at once), revokes the host lease and closes the
// etcd client.
func (m *Member) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	term := m.term
	m.mu.Unlock()
	if term != nil {
		term.end("the host left the cluster", false)
	}
	m.stopHost()
	<-m.hostDone
	m.mu.Lock()
	id := m.hostLease
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.callTimeout())
	defer cancel()
	var err error
	if id != 0 { // an observer holds none
		_, err = m.client.Revoke(ctx, id)
	}
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		err = nil
	}
	if cerr := m.client.Close(); err == nil && cerr != nil && !errors.Is(cerr, context.Canceled) {
		err = cerr
	}
	if err != nil {
		return callError(context.Background(), "leave", err)
	}
	return nil
}

// revokeSoon revokes a lease this host no longer uses, in the background
// and bounded: were etcd unreachable, the lease expires by its TTL.
func (m *Member) revokeSoon(id clientv3.LeaseID) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.callTimeout())
		defer cancel()
		m.client.Revoke(ctx, id)
	}()
}

// unavailable is the error of a call that etcd did not answer in time or
// refused for want of a quorum: EAGAIN, with what etcd's client said.
func unavailable(op string, err error) error {
	return abi.Errorf(syscall.EAGAIN, "lease "+op, "etcd unavailable: %v", err)
}

// callError is err as this package reports it: the caller's own cancel as
// it is, anything else EAGAIN (etcd's answers that are not about
// availability are handled by the callers before).
func callError(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("lease %s: %w", op, ctx.Err())
	}
	return unavailable(op, err)
}

// bounded is a context for one etcd request: ctx, cut at the call timeout,
// and refused at once by a member that knows no leader.
func (m *Member) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.callTimeout())
	return clientv3.WithRequireLeader(ctx), cancel
}
