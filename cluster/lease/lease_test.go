package lease

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// testTTL keeps the tests short: renewals every 0.67 s, a deadline 1.78 s
// after a renewal's send, takeover after a crash within about 2 s.
const testTTL = 2 * time.Second

// slack is what a bound may be late by on two busy shared cores: a
// timer's or a goroutine's wake-up, one etcd round trip.
const slack = 750 * time.Millisecond

// expiryLag is how late etcd may revoke an expired lease: its lessor
// looks for expired leases every 500 ms, then revokes through raft.
const expiryLag = 1500 * time.Millisecond

// join makes host name a member of etcd e's cluster under prefix, left
// at cleanup.
func join(t *testing.T, e *testkit.Etcd, prefix, name string, ttl time.Duration) *Member {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := Join(ctx, Config{Endpoints: e.Endpoints(), Prefix: prefix, Host: name, Addr: name + ".test:7000", TTL: ttl})
	testkit.Must(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

// campaign is m's Campaign, which must win within 10 s.
func campaign(t *testing.T, m *Member) *Term {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	term, err := m.Campaign(ctx)
	testkit.Must(t, err)
	testkit.Must(t, term.Valid())
	return term
}

// campaignAsync runs m's Campaign in the background: its term (or error)
// arrives on the channel.
func campaignAsync(m *Member) <-chan result {
	out := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		term, err := m.Campaign(ctx)
		out <- result{term, err, time.Now()}
	}()
	return out
}

type result struct {
	term *Term
	err  error
	at   time.Time
}

// wantWriter checks who m sees as the writer.
func wantWriter(t *testing.T, m *Member, host string, token uint64) {
	t.Helper()
	w, err := m.Writer(context.Background())
	testkit.Must(t, err)
	if w.Host != host || w.Token != token || w.Addr != host+".test:7000" {
		t.Errorf("writer %+v, want host %s token %d", w, host, token)
	}
}

// killHost stops m as a killed process would: its client closes without
// revoking anything, so its leases live on in etcd until their TTL.
func killHost(m *Member) {
	m.stopHost()
	m.client.Close()
}

// Successive writers get growing tokens, Writer names each, and a resigned
// writer's key is gone (ENOENT) at once.
func TestCampaignTokensGrow(t *testing.T) {
	e := testkit.StartEtcd(t, testkit.EtcdOptions{})
	a := join(t, e, "/ctxfs/s1/", "a", testTTL)
	b := join(t, e, "/ctxfs/s1/", "b", testTTL)
	_, err := a.Writer(context.Background())
	testkit.WantErrno(t, "Writer with none", err, syscall.ENOENT, "no host is the writer")
	var last uint64
	for i, m := range []*Member{a, b, a, b} {
		term := campaign(t, m)
		if term.Token <= last {
			t.Errorf("writer %d: token %d, not above the last %d", i, term.Token, last)
		}
		last = term.Token
		wantWriter(t, b, m.cfg.Host, term.Token)
		testkit.Must(t, term.Resign(context.Background()))
		testkit.WantErrno(t, "Valid after Resign", term.Valid(), syscall.EAGAIN, "resigned")
		select {
		case <-term.Done():
		default:
			t.Error("Done open after Resign")
		}
		_, err := a.Writer(context.Background())
		testkit.WantErrno(t, "Writer after Resign", err, syscall.ENOENT)
	}
}

// A second host's Campaign waits while the first holds the key, and takes
// over: at once when the first resigns; within the TTL when the first is
// killed (its keepalives stop, nothing revoked) or leaves without
// resigning. The old term's Done closes no later than its deadline.
func TestTakeover(t *testing.T) {
	e := testkit.StartEtcd(t, testkit.EtcdOptions{})
	for i, how := range []string{"resign", "kill", "close"} {
		t.Run(how, func(t *testing.T) {
			prefix := fmt.Sprintf("/ctxfs/takeover%d/", i)
			a := join(t, e, prefix, "a", testTTL)
			b := join(t, e, prefix, "b", testTTL)
			first := campaign(t, a)
			second := campaignAsync(b)
			// Three renewals' time: the holder keeps the key, b waits.
			select {
			case r := <-second:
				t.Fatalf("b's Campaign returned (%v) while a held the key", r.err)
			case <-time.After(testTTL + testTTL/2):
			}
			testkit.Must(t, first.Valid())
			wantWriter(t, b, "a", first.Token)
			ended := time.Now()
			switch how {
			case "resign":
				testkit.Must(t, first.Resign(context.Background()))
			case "kill":
				killHost(a)
			case "close":
				testkit.Must(t, a.Close())
			}
			deadline := first.Deadline()
			r := <-second
			testkit.Must(t, r.err)
			took := r.at.Sub(ended)
			bound := testTTL + expiryLag
			if how == "resign" {
				bound = slack // not the lease's expiry: the key went at once
			}
			if took > bound {
				t.Errorf("b took over %v after a's %s, want at most %v", took, how, bound)
			}
			t.Logf("b took over %v after a's %s", took, how)
			if r.term.Token <= first.Token {
				t.Errorf("b's token %d not above a's %d", r.term.Token, first.Token)
			}
			select {
			case <-first.Done():
			case <-time.After(time.Until(deadline) + slack):
				t.Fatalf("a's Done still open %v after its deadline", slack)
			}
			testkit.WantErrno(t, "a's Valid", first.Valid(), syscall.EAGAIN)
			wantWriter(t, b, "b", r.term.Token)
			testkit.Must(t, r.term.Resign(context.Background()))
		})
	}
}

// A writer key deleted behind the writer's back (an admin's etcdctl del)
// ends its term at once, though its lease is still renewed: Done closes
// long before the deadline, and another host takes over.
func TestKeyDeletedEndsTerm(t *testing.T) {
	e := testkit.StartEtcd(t, testkit.EtcdOptions{})
	a := join(t, e, "/ctxfs/del/", "a", testTTL)
	b := join(t, e, "/ctxfs/del/", "b", testTTL)
	term := campaign(t, a)
	admin, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 2 * time.Second})
	testkit.Must(t, err)
	defer admin.Close()
	_, err = admin.Delete(context.Background(), "/ctxfs/del/writer")
	testkit.Must(t, err)
	select {
	case <-term.Done():
	case <-time.After(slack):
		t.Fatalf("Done still open %v after the key was deleted", slack)
	}
	testkit.WantErrno(t, "Valid", term.Valid(), syscall.EAGAIN, "deleted or taken")
	next := campaign(t, b)
	if next.Token <= term.Token {
		t.Errorf("b's token %d not above a's %d", next.Token, term.Token)
	}
}

// WatchWriter sends the writer now, and each change: none, a, none, b.
func TestWatchWriter(t *testing.T) {
	e := testkit.StartEtcd(t, testkit.EtcdOptions{})
	a := join(t, e, "/ctxfs/w/", "a", testTTL)
	b := join(t, e, "/ctxfs/w/", "b", testTTL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changes := b.WatchWriter(ctx)
	next := func() Writer {
		t.Helper()
		select {
		case w := <-changes:
			return w
		case <-time.After(5 * time.Second):
			t.Fatal("no writer change within 5 s")
			return Writer{}
		}
	}
	if w := next(); w != (Writer{}) {
		t.Errorf("first: %+v, want none", w)
	}
	ta := campaign(t, a)
	if w := next(); w.Host != "a" || w.Token != ta.Token {
		t.Errorf("after a's campaign: %+v", w)
	}
	testkit.Must(t, ta.Resign(ctx))
	if w := next(); w != (Writer{}) {
		t.Errorf("after a's resign: %+v, want none", w)
	}
	tb := campaign(t, b)
	if w := next(); w.Host != "b" || w.Token != tb.Token {
		t.Errorf("after b's campaign: %+v", w)
	}
	cancel()
	for range changes { // closed when ctx ends
	}
}

// The bound, measured against etcd itself: with one etcd member (one
// clock), the test finds when etcd's lease expires, as etcd reports it
// (LeaseTimeToLive gives whole seconds left, truncated: the moment the
// report drops from k to k-1 is expiry - k), pauses etcd so that no later
// renewal reaches it, and checks that the term's local deadline comes
// before that expiry, that Valid holds until the deadline and fails from
// it on, and that Done closes then, though every call to etcd hangs. On
// loopback the deadline comes TTL·Drift + Margin (550 ms) before the
// expiry: a deadline of t0 + TTL, without Drift and Margin, fails here.
func TestDeadlineBeforeEtcdExpiry(t *testing.T) {
	e := testkit.StartEtcd(t, testkit.EtcdOptions{})
	// TTL 5: renewals every 1.67 s, the report drops from 4 to 3 one
	// second after each, leaving 0.67 s to pause etcd before the next.
	const ttl = 5 * time.Second
	a := join(t, e, "/ctxfs/bound/", "a", ttl)
	term := campaign(t, a)
	probe, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 2 * time.Second})
	testkit.Must(t, err)
	defer probe.Close()
	for try := 0; ; try++ {
		if try == 5 {
			t.Fatal("a renewal reached etcd after each measurement: no clean measurement in 5 tries")
		}
		expiryLow := lowestExpiry(t, probe, term.lease, 4)
		before := term.Deadline()
		e.Pause(0)
		paused := time.Now()
		if term.Deadline() != before {
			// A renewal answered between the measurement and the pause:
			// the measured expiry is not the last one. Measure again.
			e.Resume(0)
			continue
		}
		if !term.Deadline().Before(expiryLow) {
			t.Fatalf("the local deadline (%v after the pause) is not before etcd's expiry (at least %v after it)", term.Deadline().Sub(paused), expiryLow.Sub(paused))
		}
		t.Logf("deadline %v before etcd's expiry (TTL %v, drift %v, margin %v)", expiryLow.Sub(term.Deadline()), ttl, a.cfg.Drift, a.cfg.Margin)
		testkit.Must(t, term.Valid())
		select {
		case <-term.Done():
			if now := time.Now(); now.Before(term.Deadline()) {
				t.Errorf("Done closed %v before the deadline", term.Deadline().Sub(now))
			}
		case <-time.After(time.Until(term.Deadline()) + slack):
			t.Fatalf("Done still open %v after the deadline, etcd paused", slack)
		}
		testkit.WantErrno(t, "Valid after the deadline", term.Valid(), syscall.EAGAIN, "deadline passed")
		e.Resume(0)
		return
	}
}

// lowestExpiry polls the lease's TTL until etcd's report drops from k to
// k-1 and returns the earliest local time etcd's expiry can be: the send
// of the last poll that still said k, plus k seconds.
func lowestExpiry(t *testing.T, c *clientv3.Client, id clientv3.LeaseID, k int64) time.Time {
	t.Helper()
	var lastK time.Time
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
		sent := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := c.TimeToLive(ctx, id)
		cancel()
		testkit.Must(t, err)
		switch {
		case resp.TTL == k:
			lastK = sent
		case resp.TTL == k-1 && !lastK.IsZero():
			return lastK.Add(time.Duration(k) * time.Second)
		default:
			lastK = time.Time{}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("the lease's TTL never dropped from %d to %d", k, k-1)
	return time.Time{}
}

// etcd lost (every member paused) or without a quorum (2 of 3 members
// stopped): the writer's Valid fails no later than its deadline and Done
// closes; Join, Writer and Campaign fail with EAGAIN within their bounds,
// never hang; once etcd is back, a host campaigns and wins.
func TestEtcdLoss(t *testing.T) {
	for _, how := range []string{"paused", "quorum lost"} {
		t.Run(how, func(t *testing.T) {
			e := testkit.StartEtcd(t, testkit.EtcdOptions{Members: 3})
			a := join(t, e, "/ctxfs/loss/", "a", testTTL)
			b := join(t, e, "/ctxfs/loss/", "b", testTTL)
			term := campaign(t, a)
			switch how {
			case "paused":
				for i := range 3 {
					e.Pause(i)
				}
			case "quorum lost":
				e.Kill(1)
				e.Kill(2)
			}
			// The deadline is read once Done closed: a renewal sent before
			// the fault may be answered after it, and move the deadline on.
			select {
			case <-term.Done():
				if late := time.Since(term.Deadline()); late > slack {
					t.Fatalf("Done closed %v after the deadline, etcd %s", late, how)
				}
			case <-time.After(testTTL + slack):
				t.Fatalf("Done still open %v after the fault, a TTL and %v, etcd %s (deadline in %v)", testTTL+slack, slack, how, time.Until(term.Deadline()))
			}
			testkit.WantErrno(t, "Valid", term.Valid(), syscall.EAGAIN)
			callBound := b.cfg.callTimeout() + slack
			start := time.Now()
			_, err := b.Writer(context.Background())
			testkit.WantErrno(t, "Writer", err, syscall.EAGAIN, "etcd unavailable")
			if took := time.Since(start); took > callBound {
				t.Errorf("Writer took %v, bound %v", took, callBound)
			}
			start = time.Now()
			_, err = b.Campaign(context.Background())
			testkit.WantErrno(t, "Campaign", err, syscall.EAGAIN, "etcd unavailable")
			if took := time.Since(start); took > callBound {
				t.Errorf("Campaign took %v, bound %v", took, callBound)
			}
			start = time.Now()
			_, err = Join(context.Background(), Config{Endpoints: e.Endpoints(), Prefix: "/ctxfs/loss/", Host: "c", TTL: testTTL})
			testkit.WantErrno(t, "Join", err, syscall.EAGAIN, "etcd unavailable")
			if took := time.Since(start); took > dialTimeout+slack {
				t.Errorf("Join took %v, bound %v", took, dialTimeout+slack)
			}
			switch how {
			case "paused":
				for i := range 3 {
					e.Resume(i)
				}
			case "quorum lost":
				e.Restart(1)
				e.Restart(2)
			}
			back := campaign(t, b)
			if back.Token <= term.Token {
				t.Errorf("token after etcd came back %d, not above %d", back.Token, term.Token)
			}
		})
	}
}

// Join refuses at once (EAGAIN) where no etcd listens, and EINVAL for a
// config it cannot use.
func TestJoinRefusals(t *testing.T) {
	start := time.Now()
	_, err := Join(context.Background(), Config{Endpoints: []string{"http://127.0.0.1:1"}, Prefix: "/ctxfs/x/", Host: "a"})
	testkit.WantErrno(t, "Join without etcd", err, syscall.EAGAIN, "etcd unavailable")
	if took := time.Since(start); took > dialTimeout+slack {
		t.Errorf("Join without etcd took %v, bound %v", took, dialTimeout+slack)
	}
	for what, cfg := range map[string]Config{
		"no endpoints": {Prefix: "/p/", Host: "a"},
		"prefix":       {Endpoints: []string{"x"}, Prefix: "p", Host: "a"},
		"host":         {Endpoints: []string{"x"}, Prefix: "/p/", Host: "a/b"},
		"ttl":          {Endpoints: []string{"x"}, Prefix: "/p/", Host: "a", TTL: time.Millisecond},
		"margin":       {Endpoints: []string{"x"}, Prefix: "/p/", Host: "a", Margin: 3 * time.Second},
		"drift":        {Endpoints: []string{"x"}, Prefix: "/p/", Host: "a", Drift: 0.7},
	} {
		_, err := Join(context.Background(), cfg)
		testkit.WantErrno(t, what, err, syscall.EINVAL)
	}
}

// Status lists the hosts with their addresses and leases, the writer, and
// every endpoint's health; a killed member is an endpoint error, not a
// failure; a host that left is gone from the list.
func TestStatus(t *testing.T) {
	e := testkit.StartEtcd(t, testkit.EtcdOptions{Members: 3})
	a := join(t, e, "/ctxfs/st/", "a", testTTL)
	b := join(t, e, "/ctxfs/st/", "b", testTTL)
	join(t, e, "/ctxfs/other/", "z", testTTL) // another store's cluster
	term := campaign(t, a)
	e.Kill(2)
	// Right after the kill a host's lease may be unknown for a moment (its
	// keepalive or the status's own call was on the killed member, and
	// the client moves to another within its keepalive's 2 s): asked again
	// until every host's lease is known, within 5 s.
	var st Status
	var bad []HostStatus
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var err error
		st, err = b.Status(context.Background())
		testkit.Must(t, err)
		if len(st.Hosts) != 2 || st.Hosts[0].Name != "a" || st.Hosts[1].Name != "b" {
			t.Fatalf("hosts %+v, want a and b", st.Hosts)
		}
		bad = bad[:0]
		for _, h := range st.Hosts {
			if h.Addr != h.Name+".test:7000" || h.TTLLeft <= 0 || h.TTLLeft > testTTL || h.PID == 0 || h.Started.IsZero() {
				bad = append(bad, h)
			}
		}
		if len(bad) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, h := range bad {
		t.Errorf("host %+v", h)
	}
	if st.Writer.Host != "a" || st.Writer.Token != term.Token {
		t.Errorf("writer %+v, want a with token %d", st.Writer, term.Token)
	}
	if len(st.Endpoints) != 3 {
		t.Fatalf("endpoints %+v", st.Endpoints)
	}
	leader := st.Endpoints[0].Leader
	for i, ep := range st.Endpoints[:2] {
		if ep.Err != nil || ep.Version == "" || ep.Leader == 0 || ep.Leader != leader || ep.RaftIndex == 0 || ep.Endpoint != e.Endpoints()[i] {
			t.Errorf("endpoint %d: %+v", i, ep)
		}
	}
	testkit.WantErrno(t, "the killed member", st.Endpoints[2].Err, syscall.EAGAIN)
	testkit.Must(t, a.Close())
	st, err := b.Status(context.Background())
	testkit.Must(t, err)
	if len(st.Hosts) != 1 || st.Hosts[0].Name != "b" {
		t.Errorf("hosts after a left: %+v", st.Hosts)
	}
	if !errors.Is(term.Valid(), syscall.EAGAIN) {
		t.Error("a's term valid after a left")
	}
}
