// Package peer owns the wire between the hosts of a cluster: a follower
// host dials the writer host over mutually authenticated TLS (package
// cluster/ca), says in one hello line which of its own local callers it
// vouches for and which agent or model socket the request came to, and
// after the writer's one-line answer the connection carries the socket's
// bytes, both ways, untouched.
//
// The listener owns the checks that need no engine: the peer's
// certificate chains to the cluster CA (and to nothing else) and is not
// on the cluster's revocation list (at every handshake, and for the
// connections already open when a new list comes: DropRevoked), the hello
// names the host the certificate names (a host cannot speak for another
// host's users), the hello is bounded in size and time, and so are the
// connections each peer host holds at once. It never decides what a
// caller may do: the writer's engine does, as for a local caller.
package peer

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/cluster/ca"
	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/layout"
)

// Bounds of the hello exchange.
const (
	// MaxHelloBytes bounds the hello line (EMSGSIZE beyond): room for a
	// caller with thousands of supplementary groups.
	MaxHelloBytes = 64 << 10
	// maxAnswerBytes bounds the writer's answer line.
	maxAnswerBytes = 4 << 10
	// HelloDeadline bounds the TLS handshake and the hello together, and
	// the dialer's wait for the answer.
	HelloDeadline = 5 * time.Second
	// DefaultMaxConnsPerHost bounds the connections one peer host holds
	// at once (EAGAIN beyond). Each carries one local connection of that
	// host, which the writer also bounds per uid (quota.Limits.Conns).
	DefaultMaxConnsPerHost = 4096
	// maxHandshakes bounds the connections not yet past their hello:
	// anyone who can reach the port can open one.
	maxHandshakes = 256
)

// Hello is the dialer's first line after the handshake: the local caller
// it vouches for and the socket the request came to.
type Hello struct {
	Host   string   `json:"host"` // the dialing host; must be its certificate's name
	Uid    uint32   `json:"uid"`
	Gid    uint32   `json:"gid"`
	Groups []uint32 `json:"groups"`
	Kind   string   `json:"kind"`  // abi.KindAgent or abi.KindModel
	Owner  string   `json:"owner"` // the agent's name or "provider/model"
	// Session is set when the request was written to a session's ctl
	// file on the dialer's mount: that session's directory, relative to
	// the store (layout.Ref.Rel), inside Kind and Owner's container.
	// Empty for a request that came to a socket.
	Session string `json:"session,omitempty"`
	// File is set when the connection carries a change to one of that
	// session's files made through the dialer's mount (a FileChange): a
	// log (abi.FileMessages, abi.FileEvents) or a writable value
	// (abi.FileState, abi.FileCwd, abi.FileMeta). Empty for a ctl request.
	File string `json:"file,omitempty"`
	// Path is set when the connection carries a change to the tree made
	// through the dialer's mount that is no session file's (a FileChange
	// of a TreeChange kind): a directory made (a session, a home), an
	// index value written or removed; the place, relative to the store.
	// Kind, Owner, Session and File are then empty.
	Path string `json:"path,omitempty"`
}

// HelloFor is the hello that vouches for a local caller c at target t.
func HelloFor(host string, c layout.Caller, t session.Target) Hello {
	return Hello{Host: host, Uid: c.Uid, Gid: c.Gid, Groups: c.Groups, Kind: t.Kind, Owner: t.Owner}
}

// Caller is the caller the hello vouches for. It has no pid: a pid of
// another host means nothing here.
func (h Hello) Caller() layout.Caller {
	return layout.Caller{Uid: h.Uid, Gid: h.Gid, Groups: h.Groups}
}

// Target is the socket the request came to.
func (h Hello) Target() session.Target { return session.Target{Kind: h.Kind, Owner: h.Owner} }

// check refuses a hello whose target no socket could have, or whose
// session is not a session directory of that target's (EINVAL).
func (h Hello) check() error {
	if h.Path != "" || h.Kind == "" && h.Owner == "" {
		return h.checkPath()
	}
	switch {
	case h.Kind == abi.KindAgent && abi.ValidName(h.Owner), h.Kind == abi.KindModel && abi.ValidModelName(h.Owner):
	default:
		return abi.Errorf(syscall.EINVAL, "hello", "no socket is %s %q", h.Kind, h.Owner)
	}
	if h.Session == "" && h.File == "" {
		return nil
	}
	if _, ok := h.ControlRef(); !ok {
		return abi.Errorf(syscall.EINVAL, "hello", "%q is not a session of %s %q", h.Session, h.Kind, h.Owner)
	}
	if h.File != "" && !IsLog(h.File) && !IsValue(h.File) {
		return abi.Errorf(syscall.EINVAL, "hello", "%q is not a session log or a writable value", h.File)
	}
	return nil
}

// checkPath refuses a tree change's hello whose place no mount could
// have changed: a path not in the store's clean form, or one outside the
// ABI's names (EINVAL).
func (h Hello) checkPath() error {
	switch {
	case h.Kind != "" || h.Owner != "" || h.Session != "" || h.File != "":
		return abi.Errorf(syscall.EINVAL, "hello", "a tree change names its path alone")
	case !CleanRel(h.Path) || !relayedPlace(h.Path):
		return abi.Errorf(syscall.EINVAL, "hello", "%q is no path of the tree", h.Path)
	}
	return nil
}

// relayedPlace says whether rel is a place whose changes a follower
// relays: a name the ABI allows, outside the free trees (whose changes
// are not relayed).
func relayedPlace(rel string) bool {
	return layout.Classify(rel).Exists() && !layout.FreeTree(rel)
}

// CleanRel says whether rel is a path in the store's form: relative,
// without empty, "." or ".." components.
func CleanRel(rel string) bool {
	return rel != "" && path.Clean(rel) == rel && !path.IsAbs(rel) && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../")
}

// ControlRef is the session whose ctl file the request was written to,
// or whose log the change is to (Session), when it names one of the
// target's sessions in a home or a space as the store lays them out.
func (h Hello) ControlRef() (layout.Ref, bool) {
	pl := layout.Classify(h.Session + "/" + abi.FileCtl)
	ref := pl.Ref()
	ok := pl.Kind == layout.PlaceCtl && ref.Rel() == h.Session &&
		ref.Container.Kind == h.Kind && ref.Container.Owner == h.Owner
	return ref, ok
}

// answer is the writer's one line after the hello: {"ok":true}, or the
// errno (its C name, as error frames carry it) and why.
type answer struct {
	OK      bool   `json:"ok"`
	Errno   string `json:"errno,omitempty"`
	Message string `json:"message,omitempty"`
}

// errno is a refusal's errno; EIO for a name this host does not know.
func (a answer) errno() syscall.Errno {
	if errno, ok := abi.ErrnoFromName(a.Errno); ok {
		return errno
	}
	return syscall.EIO
}

// Admit answers a hello with ok: from here the connection carries the
// socket's bytes. serve (Listen) calls it, or Refuse, first.
func Admit(conn net.Conn) error { return writeAnswer(conn, answer{OK: true}) }

// Refuse answers a hello with err's errno (EAGAIN: this host is not the
// writer now) and its message, cut short.
func Refuse(conn net.Conn, err error) error {
	return writeAnswer(conn, answer{Errno: abi.ErrnoName(abi.Errno(err)), Message: abi.Clip(err.Error(), 1000)})
}

func writeAnswer(conn net.Conn, a answer) error {
	line, err := json.Marshal(a)
	if err != nil {
		return err
	}
	conn.SetWriteDeadline(time.Now().Add(HelloDeadline))
	defer conn.SetWriteDeadline(time.Time{})
	_, err = conn.Write(append(line, '\n'))
	return err
}

// Error is a failed dial: its errno (the writer's refusal, or EAGAIN when
// the writer could not be reached or proven) and the cause.
type Error struct {
	errno syscall.Errno
	Err   error
}

func (e *Error) Error() string        { return abi.ErrnoName(e.errno) + ": " + e.Err.Error() }
func (e *Error) Unwrap() error        { return e.Err }
func (e *Error) Errno() syscall.Errno { return e.errno }

// Is lets errors.Is(err, syscall.EAGAIN) see the errno.
func (e *Error) Is(target error) bool { return target == e.errno }

func dialError(errno syscall.Errno, err error) *Error { return &Error{errno: errno, Err: err} }

// readLine reads one line of at most max bytes (EMSGSIZE beyond), one
// byte at a time: what follows the line is the relayed stream, and must
// be left unread for whoever serves it.
func readLine(conn net.Conn, max int, what string) ([]byte, error) {
	var line []byte
	var b [1]byte
	for {
		if _, err := conn.Read(b[:]); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		if b[0] == '\n' {
			return line, nil
		}
		if len(line) >= max {
			return nil, abi.Errorf(syscall.EMSGSIZE, what, "longer than %d bytes", max)
		}
		line = append(line, b[0])
	}
}

// parseHello decodes a hello strictly: unknown fields are refused.
func parseHello(line []byte) (Hello, error) {
	var h Hello
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return Hello{}, abi.Errorf(syscall.EINVAL, "hello", "%v", err)
	}
	return h, h.check()
}

// Dial connects to the writer host at addr (host:port), proving the
// writer by its certificate's name or address for addr's host part, and
// sends h (h.Host empty: this host's name). It returns the connection
// once the writer admitted it; a refusal is an *Error with the writer's
// errno.
func Dial(ctx context.Context, addr string, id *ca.Identity, h Hello) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, dialError(syscall.EINVAL, err)
	}
	return DialHost(ctx, host, addr, id, h)
}

// DialHost is Dial proving the peer as peerHost, whatever address it is
// reached at: its certificate must name peerHost.
func DialHost(ctx context.Context, peerHost, addr string, id *ca.Identity, h Hello) (net.Conn, error) {
	if h.Host == "" {
		h.Host = id.Host
	}
	line, err := json.Marshal(h)
	if err != nil {
		return nil, dialError(syscall.EINVAL, err)
	}
	if len(line) > MaxHelloBytes {
		return nil, dialError(syscall.EMSGSIZE, fmt.Errorf("hello of %d bytes, at most %d", len(line), MaxHelloBytes))
	}
	ctx, cancel := context.WithTimeout(ctx, HelloDeadline)
	defer cancel()
	d := tls.Dialer{Config: id.ClientTLS(peerHost)}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		errno := syscall.EAGAIN // another may take over, or the network heal
		if rev := (*ca.RevokedError)(nil); errors.As(err, &rev) || errors.Is(err, syscall.EACCES) {
			errno = syscall.EACCES // the writer's certificate is revoked, or no host's: nothing to wait for
		}
		return nil, dialError(errno, fmt.Errorf("writer host %s at %s: %w", peerHost, addr, err))
	}
	conn := raw.(*tls.Conn)
	if err := hello(ctx, conn, line); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// hello sends the hello line and reads the answer, within ctx.
func hello(ctx context.Context, conn *tls.Conn, line []byte) error {
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	defer conn.SetDeadline(time.Time{})
	if _, err := conn.Write(append(line, '\n')); err != nil {
		return dialError(syscall.EAGAIN, fmt.Errorf("hello: %w", err))
	}
	raw, err := readLine(conn, maxAnswerBytes, "answer")
	if err != nil {
		return dialError(syscall.EAGAIN, err)
	}
	var a answer
	if err := json.Unmarshal(raw, &a); err != nil {
		return dialError(syscall.EIO, fmt.Errorf("answer: %w", err))
	}
	if a.OK {
		return nil
	}
	return dialError(a.errno(), errors.New("refused by the writer host: "+a.Message))
}

// Listener accepts peer hosts' connections.
type Listener struct {
	l     net.Listener
	id    *ca.Identity
	tls   *tls.Config // one for every connection: its ticket keys resume peers
	serve func(conn net.Conn, h Hello)

	handshakes chan struct{} // one per connection not yet past its hello

	mu       sync.Mutex
	perHost  map[string]int
	maxConns int
	open     map[net.Conn]*x509.Certificate // the peer's, once proved (nil before)
	arrived  map[net.Conn]time.Time         // the connections not yet proved, and when each came
	closed   bool
	wg       sync.WaitGroup
}

// Listen accepts peers on addr (host:port). Each connection whose peer
// proved itself and whose hello passed goes to serve, in a goroutine of
// its own, which must answer first with Admit or Refuse, then serve the
// stream (the request line and what follows); the connection is closed
// when serve returns.
func Listen(addr string, id *ca.Identity, serve func(conn net.Conn, h Hello)) (*Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	pl := &Listener{l: l, id: id, tls: id.ServerTLS(), serve: serve, handshakes: make(chan struct{}, maxHandshakes),
		perHost: map[string]int{}, maxConns: DefaultMaxConnsPerHost, open: map[net.Conn]*x509.Certificate{}, arrived: map[net.Conn]time.Time{}}
	pl.wg.Add(1)
	go pl.accept()
	return pl, nil
}

// Addr is the address listened on.
func (l *Listener) Addr() net.Addr { return l.l.Addr() }

// SetMaxConnsPerHost changes the bound on one peer host's connections
// held at once; those beyond it are refused with EAGAIN.
func (l *Listener) SetMaxConnsPerHost(n int) {
	l.mu.Lock()
	l.maxConns = n
	l.mu.Unlock()
}

// Close stops accepting, closes every connection still open (a host
// that stops being the writer serves no forwarded request on), and waits
// for their serve calls to return.
func (l *Listener) Close() error {
	err := l.l.Close()
	l.mu.Lock()
	l.closed = true
	for c := range l.open {
		c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
	return err
}

func (l *Listener) accept() {
	defer l.wg.Done()
	for {
		raw, err := l.l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: let them pass
			continue
		}
		if !l.makeRoom() {
			raw.Close() // too many strangers at once, none of them going
			continue
		}
		if !l.track(raw) {
			<-l.handshakes
			raw.Close()
			return
		}
		l.wg.Add(1)
		go l.handle(raw)
	}
}

// makeRoom takes a handshake's place for a new connection. When every
// place is held, the connection that came first among those not yet
// proved is closed for it: strangers who connect and say nothing (anyone
// who can reach the port can) push out each other, not a peer that just
// came, whose handshake takes milliseconds. False when no place came
// free within a second.
func (l *Listener) makeRoom() bool {
	select {
	case l.handshakes <- struct{}{}:
		return true
	default:
	}
	l.closeOldestArrival()
	select {
	case l.handshakes <- struct{}{}: // the closed one's handler gives its place back
		return true
	case <-time.After(time.Second):
		return false
	}
}

// closeOldestArrival closes the connection that has waited longest to
// prove itself.
func (l *Listener) closeOldestArrival() {
	l.mu.Lock()
	defer l.mu.Unlock()
	var oldest net.Conn
	var since time.Time
	for c, t := range l.arrived {
		if oldest == nil || t.Before(since) {
			oldest, since = c, t
		}
	}
	if oldest != nil {
		delete(l.arrived, oldest)
		oldest.Close()
	}
}

// track records conn as open, unless the listener is closed.
func (l *Listener) track(conn net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.open[conn] = nil
	l.arrived[conn] = time.Now()
	return true
}

// proved records the certificate conn's peer proved itself with, and
// refuses it when revoked: checked again here, under the lock DropRevoked
// takes, a list adopted while the peer was greeted cannot miss it.
func (l *Listener) proved(conn net.Conn, cert *x509.Certificate) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.id.Revoked(cert); err != nil {
		return err
	}
	l.open[conn] = cert
	delete(l.arrived, conn)
	return nil
}

// DropRevoked closes every connection whose peer's certificate is on the
// revocation list this host now holds, and says how many: the host calls
// it when it adopts a newer list, so a revoked host's relayed requests
// end at once rather than when their clients go.
func (l *Listener) DropRevoked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for c, cert := range l.open {
		if cert != nil && l.id.Revoked(cert) != nil {
			c.Close()
			n++
		}
	}
	return n
}

func (l *Listener) untrack(conn net.Conn) {
	l.mu.Lock()
	delete(l.open, conn)
	delete(l.arrived, conn)
	l.mu.Unlock()
	conn.Close()
}

// handle proves the peer, reads its hello, and serves it within its
// host's bound.
func (l *Listener) handle(raw net.Conn) {
	defer l.wg.Done()
	defer l.untrack(raw)
	conn := tls.Server(raw, l.tls)
	h, err := l.greet(conn)
	<-l.handshakes
	if err != nil {
		if conn.ConnectionState().HandshakeComplete {
			Refuse(conn, err)
		}
		return
	}
	if err := l.proved(raw, conn.ConnectionState().PeerCertificates[0]); err != nil {
		Refuse(conn, err)
		return
	}
	if err := l.take(h.Host); err != nil {
		Refuse(conn, err)
		return
	}
	defer l.give(h.Host)
	l.serve(conn, h)
}

// greet finishes the handshake and reads the hello within HelloDeadline:
// the hello must name the host the certificate names.
func (l *Listener) greet(conn *tls.Conn) (Hello, error) {
	conn.SetDeadline(time.Now().Add(HelloDeadline))
	defer conn.SetDeadline(time.Time{})
	if err := conn.Handshake(); err != nil {
		return Hello{}, err
	}
	host, err := ca.PeerHost(conn.ConnectionState())
	if err != nil {
		return Hello{}, err
	}
	if err := l.id.Revoked(conn.ConnectionState().PeerCertificates[0]); err != nil {
		return Hello{}, err // before its hello is read: a revoked host says nothing
	}
	line, err := readLine(conn, MaxHelloBytes, "hello")
	if err != nil {
		return Hello{}, err
	}
	h, err := parseHello(line)
	if err != nil {
		return Hello{}, err
	}
	if h.Host != host {
		return Hello{}, abi.Errorf(syscall.EACCES, "hello", "host %q speaks for host %q", host, h.Host)
	}
	return h, nil
}

// take holds one of host's connections, or refuses (EAGAIN).
func (l *Listener) take(host string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.perHost[host] >= l.maxConns {
		return abi.Errorf(syscall.EAGAIN, "hello", "host %s holds %d connections, the most one host may", host, l.maxConns)
	}
	l.perHost[host]++
	return nil
}

func (l *Listener) give(host string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.perHost[host]--; l.perHost[host] <= 0 {
		delete(l.perHost, host)
	}
}
