package lease

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Term is this host's time as the store's writer: from the Campaign that
// won the writer key to the moment Valid first fails.
type Term struct {
	// Token is the writer key's create revision: every new writer's is
	// greater than every earlier writer's, so a record stamped with it
	// says which term wrote it.
	Token uint64

	m     *Member
	lease clientv3.LeaseID
	ttl   time.Duration // the TTL the deadline is reckoned from: the configured one, at most etcd's

	// start is the term's monotonic base; deadline is start + this many
	// nanoseconds. It only moves forward, by renewals.
	start    time.Time
	deadline atomic.Int64

	lost    atomic.Bool // set once, before done closes: Valid fails from then on
	endOnce sync.Once
	why     string // why the term ended, written before lost is set
	done    chan struct{}
	stop    context.CancelFunc // ends renew, watchKey and expireAtDeadline
}

// writerValue is the value of Prefix+"writer".
type writerValue struct {
	Host string `json:"host"`
	Addr string `json:"addr"`
}

// Campaign blocks until this host holds the writer key under a fresh lease
// and returns its term, valid. While another host holds the key it waits
// for the key to go (resigned, or its lease expired); while it waits it
// asks etcd every TTL/3, and returns an EAGAIN-wrapping error when etcd
// does not answer within the call timeout. A key left by an earlier run of
// this same host name is waited out like any other.
func (m *Member) Campaign(ctx context.Context) (*Term, error) {
	for {
		if err := m.waitNoWriter(ctx); err != nil {
			return nil, err
		}
		term, err := m.tryTake(ctx)
		if err != nil || term != nil {
			return term, err
		}
	}
}

// waitNoWriter returns once the writer key is absent, as a linearizable
// read saw it.
func (m *Member) waitNoWriter(ctx context.Context) error {
	probe := time.NewTicker(m.cfg.TTL / 3)
	defer probe.Stop()
	var changes clientv3.WatchChan
	stopWatch := func() {}
	defer func() { stopWatch() }()
	for {
		resp, err := m.get(ctx, "campaign", m.writerKey())
		if err != nil {
			return err
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		if changes == nil {
			changes, stopWatch = m.watch(ctx, m.writerKey(), resp.Header.Revision+1)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case w, ok := <-changes:
			if !ok || w.Err() != nil {
				// Watch again after the next probe, not in a loop.
				stopWatch()
				changes = nil
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-probe.C:
				}
			}
		case <-probe.C:
		}
	}
}

// watch watches key from revision rev on, until ctx ends or stop is
// called; a member that loses its leader ends the watch (the channel
// closes).
func (m *Member) watch(ctx context.Context, key string, rev int64) (changes clientv3.WatchChan, stop func()) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	return m.client.Watch(wctx, key, clientv3.WithRev(rev)), cancel
}

// get reads key with a linearizable read, bounded.
func (m *Member) get(ctx context.Context, op, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	bctx, cancel := m.bounded(ctx)
	defer cancel()
	resp, err := m.client.Get(bctx, key, opts...)
	if err != nil {
		return nil, callError(ctx, op, err)
	}
	return resp, nil
}

// tryTake makes the writer key this host's under a fresh lease, if no one
// holds it: the term, or nil when another host was faster.
func (m *Member) tryTake(ctx context.Context) (*Term, error) {
	// Sent before the grant: etcd starts the lease at its receipt, later.
	sent := time.Now()
	bctx, cancel := m.bounded(ctx)
	defer cancel()
	grant, err := m.client.Grant(bctx, ttlSeconds(m.cfg.TTL))
	if err != nil {
		return nil, callError(ctx, "campaign", err)
	}
	value, _ := json.Marshal(writerValue{Host: m.cfg.Host, Addr: m.cfg.Addr})
	key := m.writerKey()
	resp, err := m.client.Txn(bctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(value), clientv3.WithLease(grant.ID))).
		Commit()
	if err != nil || !resp.Succeeded {
		// Lost the race, or the answer: revoking takes the key with the
		// lease should the put have happened after all.
		m.revokeSoon(grant.ID)
		if err != nil {
			return nil, callError(ctx, "campaign", err)
		}
		return nil, nil
	}
	ttl := min(m.cfg.TTL, time.Duration(grant.TTL)*time.Second)
	term := m.newTerm(grant.ID, uint64(resp.Header.Revision), sent, ttl)
	if err := term.Valid(); err != nil {
		// The exchange took longer than the window: no use as a term.
		return nil, nil
	}
	m.mu.Lock()
	closed := m.closed
	if !closed {
		m.term = term
	}
	m.mu.Unlock()
	if closed {
		term.end("the host left the cluster", true)
		return nil, abi.Errorf(syscall.EAGAIN, "lease campaign", "the host left the cluster")
	}
	m.log.Info("lease: this host is the writer", "token", term.Token, "ttl", ttl)
	return term, nil
}

// newTerm starts a term whose lease's grant was sent at sent, with its
// renewals, the watch of its key and the timer of its deadline.
func (m *Member) newTerm(id clientv3.LeaseID, token uint64, sent time.Time, ttl time.Duration) *Term {
	ctx, stop := context.WithCancel(context.Background())
	t := &Term{Token: token, m: m, lease: id, ttl: ttl, start: sent, done: make(chan struct{}), stop: stop}
	t.extend(sent, ttl)
	go t.renew(ctx)
	go t.watchKey(ctx)
	go t.expireAtDeadline(ctx)
	return t
}

// Valid is nil while this host may still write and acknowledge as the
// writer; from the first moment it is not, it is an error wrapping
// syscall.EAGAIN, forever. It is cheap (an atomic load and a monotonic
// clock read) and is meant to be called before every acknowledgement.
//
// The bound: a keepalive (or the grant) sent at local time t0 that
// succeeds means etcd's leader extended the lease to at least its receipt
// time + TTL, and receipt ≥ send; so this host may act until
//
//	t0 + TTL·(1−Drift) − Margin
//
// by its own monotonic clock, which comes before etcd can expire the
// lease as long as this clock's rate differs from the etcd leader's by
// less than Drift (TTL leader-seconds last at least TTL·(1−Drift) here).
// Margin is the time between a Valid that said nil and the act it
// allowed. A keepalive that fails or hangs does not move the deadline,
// and the deadline is a timer of this process, never the result of a
// call, so no network fault can delay it. A new etcd leader extends every
// lease by its election timeout (etcd's lessor Promote), which covers the
// renewals a deposed leader may still have answered.
func (t *Term) Valid() error {
	if t.lost.Load() {
		return t.err()
	}
	if time.Since(t.start) >= time.Duration(t.deadline.Load()) {
		t.end("the lease's local deadline passed without a renewal", true)
		return t.err()
	}
	return nil
}

// Deadline is the local time (monotonic) until which Valid holds, as the
// renewals so far set it.
func (t *Term) Deadline() time.Time {
	return t.start.Add(time.Duration(t.deadline.Load()))
}

func (t *Term) err() error {
	return abi.Errorf(syscall.EAGAIN, "lease", "not the writer any more (token %d): %s", t.Token, t.why)
}

// Done is closed once Valid fails: the deadline passed without a renewal,
// the key was deleted or taken, etcd no longer knows the lease, Resign, or
// Close.
func (t *Term) Done() <-chan struct{} { return t.done }

// end ends the term for the reason why: Valid fails from now on, Done
// closes, the renewals stop. With release the lease is then revoked in
// the background: this host acts no more, so another may take over now
// rather than when etcd expires the lease (should etcd still answer).
func (t *Term) end(why string, release bool) {
	t.endOnce.Do(func() {
		t.why = why
		t.lost.Store(true)
		close(t.done)
		t.stop()
		t.m.log.Warn("lease: this host is no longer the writer", "token", t.Token, "why", why)
		t.m.mu.Lock()
		if t.m.term == t {
			t.m.term = nil
		}
		t.m.mu.Unlock()
		if release {
			t.m.revokeSoon(t.lease)
		}
	})
}

// extend moves the deadline to sent + TTL·(1−Drift) − Margin for a renewal
// sent at sent, if that is later.
func (t *Term) extend(sent time.Time, ttl time.Duration) {
	cfg := t.m.cfg
	cfg.TTL = ttl
	d := int64(sent.Sub(t.start) + cfg.window())
	for {
		old := t.deadline.Load()
		if d <= old || t.deadline.CompareAndSwap(old, d) {
			return
		}
	}
}

// renew sends a keepalive every TTL/3, each bounded by TTL/4 so that a
// hung one leaves time for another before the deadline; a failed one is
// tried again soon.
func (t *Term) renew(ctx context.Context) {
	every, attempt := t.ttl/3, t.ttl/4
	failing := false // logged once per run of failures
	for {
		sent := time.Now()
		actx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), attempt)
		resp, err := t.m.client.KeepAliveOnce(actx, t.lease)
		cancel()
		next := every
		switch {
		case err == nil:
			t.extend(sent, min(t.ttl, time.Duration(resp.TTL)*time.Second))
			if failing {
				t.m.log.Info("lease: renewals succeed again", "token", t.Token)
				failing = false
			}
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			t.end("etcd no longer knows the lease", false)
			return
		case ctx.Err() != nil:
			return
		default:
			if !failing {
				t.m.log.Warn("lease: renewal failed; trying again until the deadline", "token", t.Token, "deadline_in", time.Until(t.Deadline()), "err", err)
				failing = true
			}
			next = t.ttl / 20
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(sent.Add(next))):
		}
	}
}

// expireAtDeadline ends the term when its deadline passes, even while
// every etcd call hangs: Done closes on time.
func (t *Term) expireAtDeadline(ctx context.Context) {
	timer := time.NewTimer(time.Until(t.Deadline()))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			if t.Valid() != nil {
				return
			}
			timer.Reset(time.Until(t.Deadline()))
		}
	}
}

// watchKey ends the term when the writer key is deleted or no longer this
// term's. When the watch breaks it reads the key instead, and watches
// again from there.
func (t *Term) watchKey(ctx context.Context) {
	key := t.m.writerKey()
	from := int64(t.Token) + 1
	for ctx.Err() == nil {
		changes, cancel := t.m.watch(ctx, key, from)
		for w := range changes {
			if w.Err() != nil {
				break
			}
			for _, ev := range w.Events {
				if ev.Type == mvccpb.DELETE || uint64(ev.Kv.CreateRevision) != t.Token {
					cancel()
					t.end("the writer key was deleted or taken", true)
					return
				}
			}
			from = w.Header.Revision + 1
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-time.After(t.ttl / 3):
		}
		resp, err := t.m.get(ctx, "watch", key)
		if err != nil {
			continue
		}
		if len(resp.Kvs) == 0 || uint64(resp.Kvs[0].CreateRevision) != t.Token {
			t.end("the writer key was deleted or taken", true)
			return
		}
		from = resp.Header.Revision + 1
	}
}

// Resign hands the writer key over cleanly: the term ends first (this
// host acts no more), then the lease is revoked, which deletes the key
// with it in one step, so that another host's Campaign takes over at once.
// An EAGAIN-wrapping error says etcd did not answer: the key then goes
// when the lease expires.
func (t *Term) Resign(ctx context.Context) error {
	t.end("resigned", false)
	bctx, cancel := t.m.bounded(ctx)
	defer cancel()
	_, err := t.m.client.Revoke(bctx, t.lease)
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return callError(ctx, "resign", err)
	}
	return nil
}
