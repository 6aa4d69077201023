package peer

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/cluster/ca"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// revoke revokes host at the CA of c and has each of ids adopt the list.
func (c cluster) revoke(t *testing.T, host string, ids ...*ca.Identity) {
	t.Helper()
	crl, _, err := ca.Revoke(c.caDir, []string{host}, nil)
	testkit.Must(t, err)
	for _, id := range ids {
		if ok, err := id.Adopt(crl); !ok || err != nil {
			t.Fatalf("%s adopts the list: %v, %v", id.Host, ok, err)
		}
	}
}

// exchange dials l as id and carries one line; it returns the dial's
// error and whether the connection resumed a TLS session.
func exchange(l *Listener, id *ca.Identity) (resumed bool, err error) {
	conn, err := Dial(context.Background(), l.Addr().String(), id, testHello())
	if err != nil {
		return false, err
	}
	defer conn.Close()
	conn.Write([]byte("{}\n"))
	io.ReadAll(conn)
	return conn.(*tls.Conn).ConnectionState().DidResume, nil
}

// TestRevokedHostRefused: once the writer holds a list that names beta,
// beta's dial is refused with EACCES (saying so) before its hello
// reaches serve, its resumed TLS session included; alpha's own and other
// hosts' connections are not.
func TestRevokedHostRefused(t *testing.T) {
	c := newCluster(t)
	l, rec := echoListener(t, c.alpha)
	if _, err := exchange(l, c.beta); err != nil { // beta now holds a ticket
		t.Fatal(err)
	}
	before := rec.count()
	c.revoke(t, "beta", c.alpha)
	resumed, err := exchange(l, c.beta)
	testkit.WantErrno(t, "a revoked host's dial", err, syscall.EACCES, "revoked")
	if resumed || rec.count() != before {
		t.Fatalf("a revoked host reached serve (resumed %v)", resumed)
	}
}

// TestRevokedWriterRefused: a host that holds a list naming the writer
// refuses to relay to it (EACCES, not EAGAIN: there is nothing to wait
// for), resuming a session it held a ticket of or not.
func TestRevokedWriterRefused(t *testing.T) {
	c := newCluster(t)
	l, rec := echoListener(t, c.alpha)
	if _, err := exchange(l, c.beta); err != nil {
		t.Fatal(err)
	}
	before := rec.count()
	c.revoke(t, "alpha", c.beta)
	_, err := exchange(l, c.beta)
	var rev *ca.RevokedError
	if !errors.As(err, &rev) || rev.Host != "alpha" {
		t.Fatalf("dial to a revoked writer: %v, want alpha revoked", err)
	}
	testkit.WantErrno(t, "dial to a revoked writer", err, syscall.EACCES)
	if rec.count() != before {
		t.Fatal("the revoked writer was sent a hello")
	}
}

// TestDropRevoked: the connections a host holds open when its writer
// adopts a list naming it are closed by DropRevoked, and no other's.
func TestDropRevoked(t *testing.T) {
	c := newCluster(t)
	l, _ := echoListener(t, c.alpha)
	conn, err := Dial(context.Background(), l.Addr().String(), c.beta, testHello())
	testkit.Must(t, err)
	defer conn.Close()
	if n := l.DropRevoked(); n != 0 {
		t.Fatalf("%d connections dropped with no list", n)
	}
	c.revoke(t, "beta", c.alpha)
	if n := l.DropRevoked(); n != 1 {
		t.Fatalf("%d connections dropped, want beta's 1", n)
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(conn); err != nil || len(b) != 0 {
		t.Fatalf("beta's connection after the drop: %q, %v; want it closed", b, err)
	}
}
