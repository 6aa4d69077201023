package server

import (
	"bufio"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/layout"
)

// Several hosts, one store (SPEC 19): one writer host runs the engine;
// the others (followers) relay each local connection to it. A follower
// learns its caller from the peer credentials, as for a request it
// serves itself, and vouches for that caller to the writer (package
// cluster/peer, which also owns the TLS and the hello); the writer serves
// the relayed connection with ServeRemote exactly as a local one of that
// caller. Nothing here knows TLS or etcd: the lead's wiring passes the
// connections in.

// ForwardFunc opens a connection to the writer host for one local
// connection of caller c to target t, already admitted by the writer
// (cluster/peer.Dial). Its error is the client's error frame: EAGAIN when
// no writer is known or reachable.
type ForwardFunc func(c layout.Caller, t session.Target) (net.Conn, error)

// errNoEngine refuses a request when this host neither writes nor knows
// where to forward: the client may try again.
var errNoEngine = abi.Errorf(syscall.EAGAIN, "", "this host serves no requests now: no writer host is known")

// SetEngine gives the sockets the engine that answers requests from now
// on; nil takes it away (a host that stopped being the writer). A
// connection already being served keeps the engine it began with.
func (s *Sockets) SetEngine(e *session.Engine) { s.engine.Store(e) }

// SetForward makes every local connection accepted from now on relayed
// whole (its request line and everything after, both ways, until either
// side closes) to the connection fn opens; nil serves them here again.
// A connection already being relayed or served goes on as it began.
func (s *Sockets) SetForward(fn ForwardFunc) {
	if fn == nil {
		s.forward.Store(nil)
		return
	}
	s.forward.Store(&fn)
}

// SetRelayQuota sets the bound on each uid's connections relayed at once
// (a follower has no engine whose quota it could use); by default the
// connections quota of quota.NewLimits with no configuration. A
// connection already relayed gives its place back to the quota it took.
func (s *Sockets) SetRelayQuota(q *quota.Quota) { s.relayed.Store(q) }

// ServeRemote answers the one request of conn, relayed by another host
// that vouches for caller c at target t, exactly as a local connection of
// c's to t: c's quota of connections, the request deadline, the engine's
// rules. conn is closed when it returns. Its end is a hang-up (a follower
// never relays a half-close: relay), so a reply still working stops
// when the follower's client leaves.
func (s *Sockets) ServeRemote(conn net.Conn, c layout.Caller, t session.Target) {
	defer conn.Close()
	c.Pid = 0 // a pid of another host means nothing here
	s.serve(conn, c, t)
}

// relay carries local connection lc of caller c to the writer host, within
// c's quota of relayed connections. The client's bytes go to the writer
// until the client shuts its writing (the end is not passed on: over the
// wire an end is a hang-up, ServeRemote); the writer's bytes go to the
// client until the writer closes. A client that hangs up closes the
// writer's connection, so that its reply stops there too.
func (s *Sockets) relay(lc *net.UnixConn, c layout.Caller, t session.Target, fn ForwardFunc) {
	w := writers.Get().(*bufio.Writer)
	w.Reset(lc)
	defer func() { w.Reset(nil); writers.Put(w) }()
	q := s.relayed.Load()
	if err := q.Take(c.Uid); err != nil {
		s.refuse(nil, lc, w, err, c, t, nil)
		return
	}
	defer q.Give(c.Uid)
	rc, err := fn(c, t)
	if err != nil {
		s.refuseRead(lc, w, err, c, t) // under the quota taken above
		return
	}
	defer rc.Close()
	done := make(chan struct{})
	defer close(done)
	go func() {
		io.Copy(rc, lc)
		ctx, cancel := hangUp(lc)
		defer cancel()
		select {
		case <-ctx.Done():
			rc.Close()
		case <-done:
		}
	}()
	io.Copy(deadlineWriter{lc}, rc)
}

// deadlineWriter gives each write to a client frameDeadline, as the
// writer's own frames get: a client that does not read is dropped.
type deadlineWriter struct{ conn net.Conn }

func (d deadlineWriter) Write(p []byte) (int, error) {
	d.conn.SetWriteDeadline(time.Now().Add(frameDeadline))
	return d.conn.Write(p)
}

// refuseRead answers err to conn's request once the request is read
// (within its deadline): a client refused before it wrote would see its
// write fail (EPIPE) instead of the reason (EAGAIN: no writer now). The
// caller holds a place in one of c's quotas for the read.
func (s *Sockets) refuseRead(conn net.Conn, w *bufio.Writer, err error, c layout.Caller, t session.Target) {
	br := readers.Get().(*bufio.Reader)
	br.Reset(conn)
	readWithin(conn, br)
	br.Reset(nil)
	readers.Put(br)
	s.refuse(nil, conn, w, err, c, t, nil)
}

// refuseNoEngine answers errNoEngine to a request that came while this
// host has no engine (between a cluster host's terms): read first, within
// c's quota of relayed connections; at once beyond it, or on a host that
// relays nothing.
func (s *Sockets) refuseNoEngine(conn net.Conn, w *bufio.Writer, c layout.Caller, t session.Target) {
	q := s.relayed.Load()
	if q == nil || q.Take(c.Uid) != nil {
		s.refuse(nil, conn, w, errNoEngine, c, t, nil)
		return
	}
	defer q.Give(c.Uid)
	s.refuseRead(conn, w, errNoEngine, c, t)
}
