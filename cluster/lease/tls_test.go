package lease

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/cluster/ca"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// tlsEtcd is a one-member etcd that serves its clients over https with a
// certificate of the cluster's CA and lets in only clients with a
// certificate of that CA that its revocation list (crl) does not name;
// alpha holds the CA, beta is another host of it.
type tlsEtcd struct {
	e           *testkit.Etcd
	caDir, crl  string
	alpha, beta *ca.Identity
}

func startTLSEtcd(t *testing.T) *tlsEtcd {
	t.Helper()
	base := t.TempDir()
	caDir, etcdDir, betaDir := filepath.Join(base, "ca"), filepath.Join(base, "etcd"), filepath.Join(base, "beta")
	testkit.Must(t, ca.Init(caDir, "alpha", []string{"127.0.0.1"}))
	testkit.Must(t, ca.IssueEtcd(caDir, "etcd", []string{"127.0.0.1"}, etcdDir))
	testkit.Must(t, ca.Issue(caDir, "beta", []string{"127.0.0.1"}, betaDir))
	x := &tlsEtcd{caDir: caDir, crl: filepath.Join(base, "etcd.crl")}
	x.publish(t) // an empty list: etcd reads the file at each handshake
	var err error
	x.alpha, err = ca.Load(caDir)
	testkit.Must(t, err)
	x.beta, err = ca.Load(betaDir)
	testkit.Must(t, err)
	x.e = testkit.StartEtcd(t, testkit.EtcdOptions{TLS: &testkit.EtcdTLS{
		CertFile: filepath.Join(etcdDir, ca.HostCertFile), KeyFile: filepath.Join(etcdDir, ca.HostKeyFile),
		CAFile: filepath.Join(caDir, ca.CACertFile), CRLFile: x.crl, Client: x.alpha.EtcdTLS(nil),
	}})
	return x
}

// publish revokes hosts at the CA and hands the list to etcd (its file).
func (x *tlsEtcd) publish(t *testing.T, hosts ...string) {
	t.Helper()
	crl, _, err := ca.Revoke(x.caDir, hosts, nil)
	testkit.Must(t, err)
	testkit.Must(t, os.WriteFile(x.crl, crl, 0o600))
}

func joinTLS(endpoints []string, name string, conf *tls.Config) (*Member, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return Join(ctx, Config{Endpoints: endpoints, Prefix: "/ctxfs/tls/", Host: name, Addr: name + ".test:7000", TTL: testTTL, TLS: conf})
}

// TestJoinOverTLS: over an etcd that requires client certificates, a host
// with its cluster certificate (EtcdTLS) joins and campaigns; a client
// without one, one of another CA, and one that does not trust etcd's
// certificate are refused (EAGAIN, within the join's bound); once the
// CA's list names beta (etcd's --client-crl-file), beta is refused and
// alpha goes on.
func TestJoinOverTLS(t *testing.T) {
	testkit.RequireEtcd(t)
	x := startTLSEtcd(t)
	eps := x.e.Endpoints()
	a, err := joinTLS(eps, "alpha", x.alpha.EtcdTLS(nil))
	testkit.Must(t, err)
	defer a.Close()
	campaign(t, a)

	stranger := startStranger(t)
	for name, conf := range map[string]*tls.Config{
		"no client certificate": {RootCAs: x.alpha.EtcdTLS(nil).RootCAs},
		"another CA's host":     stranger.EtcdTLS(x.alpha.EtcdTLS(nil).RootCAs),
		"etcd's CA not trusted": x.beta.EtcdTLS(stranger.EtcdTLS(nil).RootCAs),
	} {
		m, err := joinTLS(eps, "mallory", conf)
		if err == nil {
			m.Close()
			t.Fatalf("%s: joined", name)
		}
		testkit.WantErrno(t, name, err, syscall.EAGAIN)
	}
	b, err := joinTLS(eps, "beta", x.beta.EtcdTLS(nil))
	testkit.Must(t, err)
	b.Close()

	x.publish(t, "beta")
	if m, err := joinTLS(eps, "beta", x.beta.EtcdTLS(nil)); err == nil {
		m.Close()
		t.Fatal("a revoked host joined etcd")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := a.Writer(ctx); err != nil {
		t.Fatalf("alpha after beta's revocation: %v", err)
	}
}

// startStranger is the identity of a host of another cluster's CA.
func startStranger(t *testing.T) *ca.Identity {
	dir := filepath.Join(t.TempDir(), "other")
	testkit.Must(t, ca.Init(dir, "mallory", []string{"127.0.0.1"}))
	id, err := ca.Load(dir)
	testkit.Must(t, err)
	return id
}
