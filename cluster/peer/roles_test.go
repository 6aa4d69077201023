package peer

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/cluster/ca"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// An etcd server's certificate (ctxfs cluster join --etcd), which the
// cluster CA signs and the etcd daemon's user holds, is no host's: it
// does not load as a host's identity, a peer presenting it is refused
// before its hello is served (here vouching for root), and a dialer
// refuses a writer presenting it.
func TestEtcdCertificateIsNoHost(t *testing.T) {
	c := newCluster(t)
	dir := filepath.Join(t.TempDir(), "etcd1")
	testkit.Must(t, ca.IssueEtcd(c.caDir, "etcd1", []string{"127.0.0.1"}, dir))
	if _, err := ca.Load(dir); err == nil {
		t.Fatal("an etcd certificate loaded as a host's identity")
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, ca.HostCertFile), filepath.Join(dir, ca.HostKeyFile))
	testkit.Must(t, err)
	caPEM, err := os.ReadFile(filepath.Join(dir, ca.CACertFile))
	testkit.Must(t, err)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)

	// As a peer: the TLS handshake passes (the CA signed it), the hello
	// is refused.
	l, rec := echoListener(t, c.alpha)
	conn, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: "alpha"})
	testkit.Must(t, err)
	defer conn.Close()
	h := testHello()
	h.Host, h.Uid, h.Gid, h.Groups = "etcd1", 0, 0, []uint32{0}
	line, _ := json.Marshal(h)
	testkit.WantErrno(t, "a peer with etcd's certificate", hello(context.Background(), conn, line), syscall.EACCES)
	rec.mu.Lock()
	served := len(rec.hellos)
	rec.mu.Unlock()
	if served != 0 {
		t.Fatalf("the etcd certificate's hello was served")
	}

	// As a writer: a follower dialing it refuses its certificate.
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool})
	testkit.Must(t, err)
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.(*tls.Conn).Handshake()
			conn.Close()
		}
	}()
	_, err = DialHost(context.Background(), "etcd1", ln.Addr().String(), c.beta, testHello())
	testkit.WantErrno(t, "a writer with etcd's certificate", err, syscall.EACCES)
}
