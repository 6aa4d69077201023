// Package ca owns the cluster's certificate authority and each host's
// identity in it: the CA key and certificate (made once, by `ctxfs
// cluster init`), host certificates it signs (`ctxfs cluster join`), and
// the TLS configurations hosts talk to each other with: TLS 1.3 only, a
// certificate chaining to the cluster CA required of both sides, and
// nothing else trusted (never the system's roots).
//
// It also owns revocation (crl.go): the CA's copies of the certificates
// it issued, the revocation list it signs, and each host's adoption of the
// newest list signed by its CA.
//
// Its files are 0600 in a 0700 directory of the server's uid, and a
// directory that anyone else could change (it, or one above it) is
// refused: whoever could swap a file there could make themselves a host
// of the cluster. It never writes the CA key anywhere but the CA's own
// directory, and never overwrites a file but the revocation list (a
// newer one, whole or not at all).
package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
)

// The files of a directory: the CA's certificate goes with every host,
// its key stays where init made it.
const (
	CACertFile   = "ca.crt"
	CAKeyFile    = "ca.key"
	HostCertFile = "host.crt"
	HostKeyFile  = "host.key"
)

// Lifetimes: a CA outlives the hosts it signs; a host certificate is
// renewed by a new join.
const (
	caLifetime   = 10 * 365 * 24 * time.Hour
	hostLifetime = 2 * 365 * 24 * time.Hour
	clockSkew    = time.Hour // NotBefore is set back by this much: hosts' clocks differ
)

// maxHostName bounds a host name (a DNS name's length).
const maxHostName = 253

// Identity is one host in the cluster: its certificate and key, and the
// cluster CA it trusts.
type Identity struct {
	Host string          // this host's name, as its certificate says
	cert tls.Certificate // with its key
	pool *x509.CertPool  // the cluster CA alone
	// caCert is the cluster CA, whose revocation lists alone a host
	// adopts; revoked is the newest it adopted (nil: none).
	caCert  *x509.Certificate
	revoked atomic.Pointer[revocations]
	// sessions keeps the TLS 1.3 tickets peers gave this host, so that
	// its next connection to a peer resumes (docs/benchmarks.md, "A
	// relayed change's connection").
	sessions tls.ClientSessionCache
}

// resumable is how many peers' tickets an identity keeps.
const resumable = 64

// Init makes a cluster CA in dir (created 0700 when missing) and this
// host's certificate signed by it. It refuses a dir that already holds
// any of the files, or that someone else could change.
func Init(dir, host string, addrs []string) error {
	if err := checkHost(host, addrs); err != nil {
		return err
	}
	if err := privateDir(dir, true); err != nil {
		return err
	}
	if err := refuseExisting(dir, CACertFile, CAKeyFile, HostCertFile, HostKeyFile); err != nil {
		return err
	}
	caCert, caKey, err := newCA()
	if err != nil {
		return err
	}
	if err := writeNew(dir, CAKeyFile, keyPEM(caKey)); err != nil {
		return err
	}
	if err := writeNew(dir, CACertFile, certPEM(caCert.Raw)); err != nil {
		return err
	}
	return issueInto(dir, dir, caCert, caKey, host, addrs, HostRole)
}

// The roles a certificate of the cluster CA is made for, in its subject's
// organizational unit. Only a HostRole certificate speaks for a host: a
// peer vouching for its users' uids, a writer relaying their requests.
// etcd's certificate (EtcdRole) lets an etcd server be reached over TLS
// and nothing else: its key lives with the etcd daemon, under another
// user, and must not let that user (or anyone who takes etcd) vouch for
// root to the writer.
const (
	HostRole = "ctxfs-host"
	EtcdRole = "ctxfs-etcd"
)

// Issue makes a certificate for host signed by the CA in caDir and writes
// it, its key and the CA's certificate to outDir (created 0700 when
// missing), for the admin to copy to that host. The CA key is never
// written there.
func Issue(caDir, host string, addrs []string, outDir string) error {
	return issueAs(caDir, host, addrs, outDir, HostRole)
}

// IssueEtcd is Issue of a certificate for an etcd server (EtcdRole): the
// cluster's hosts reach etcd with it verified, and no host takes it as a
// peer's.
func IssueEtcd(caDir, name string, addrs []string, outDir string) error {
	return issueAs(caDir, name, addrs, outDir, EtcdRole)
}

func issueAs(caDir, host string, addrs []string, outDir, role string) error {
	if err := checkHost(host, addrs); err != nil {
		return err
	}
	caCert, caKey, err := loadCA(caDir)
	if err != nil {
		return err
	}
	if err := privateDir(outDir, true); err != nil {
		return err
	}
	if err := refuseExisting(outDir, CACertFile, HostCertFile, HostKeyFile); err != nil {
		return err
	}
	if err := writeNew(outDir, CACertFile, certPEM(caCert.Raw)); err != nil {
		return err
	}
	return issueInto(caDir, outDir, caCert, caKey, host, addrs, role)
}

// Load reads this host's identity from dir: its certificate and key and
// the cluster CA's certificate. The certificate must chain to the CA.
func Load(dir string) (*Identity, error) {
	if err := privateDir(dir, false); err != nil {
		return nil, err
	}
	caCert, err := readCert(dir, CACertFile)
	if err != nil {
		return nil, err
	}
	certBytes, err := readPrivate(dir, HostCertFile)
	if err != nil {
		return nil, err
	}
	keyBytes, err := readPrivate(dir, HostKeyFile)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certBytes, keyBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: pool,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, fmt.Errorf("%s: the host certificate is not the cluster CA's: %w", dir, err)
	}
	if err := isHost(cert.Leaf); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	id := &Identity{Host: cert.Leaf.Subject.CommonName, cert: cert, pool: pool, caCert: caCert,
		sessions: tls.NewLRUClientSessionCache(resumable)}
	if err := id.loadCRL(dir); err != nil {
		return nil, err
	}
	return id, nil
}

// ServerTLS is the configuration a host listens for its peers with: TLS
// 1.3, and a client certificate that chains to the cluster CA required.
// A listener keeps one for all its connections: its session ticket keys
// are the configuration's, so a peer resumes only with the one that gave
// it its ticket (a resumed session carries the client's verified chain,
// checked again for expiry).
func (id *Identity) ServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{id.cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    id.pool,
	}
}

// ClientTLS is the configuration a host dials a peer with: TLS 1.3, its
// own certificate offered, and the peer's verified against the cluster CA
// alone, against serverName (the peer's host name or the address it
// was reached at), which must be given, against the revocation list
// (a *RevokedError, resumed connections included), and as a host's
// (HostRole: etcd's certificate, whose name a writer key in etcd could
// give, is no writer's).
func (id *Identity) ClientTLS(serverName string) *tls.Config {
	return &tls.Config{
		MinVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{id.cert},
		RootCAs:          id.pool,
		ServerName:       serverName,
		VerifyConnection: id.verifyHost,

		ClientSessionCache: id.sessions,
	}
}

// EtcdTLS is the configuration a host reaches etcd with over https: its
// own certificate offered (an etcd run with --client-cert-auth and the
// cluster CA among its --trusted-ca-file lets no one else in), etcd's
// certificate verified against etcdCA (nil: the cluster CA, which can
// sign etcd's certificates too: ctxfs cluster join --host etcd1 …) and
// its address, and against the revocation list. TLS 1.2 at least: etcd's
// own minimum.
func (id *Identity) EtcdTLS(etcdCA *x509.CertPool) *tls.Config {
	if etcdCA == nil {
		etcdCA = id.pool
	}
	return &tls.Config{
		MinVersion:       tls.VersionTLS12,
		Certificates:     []tls.Certificate{id.cert},
		RootCAs:          etcdCA,
		VerifyConnection: id.verifyPeer,
	}
}

// LoadPool reads the PEM certificates of a CA file the admin names (etcd's
// own CA, for EtcdTLS): any owner, no symlink at its last name.
func LoadPool(path string) (*x509.CertPool, error) {
	raw, err := readNoFollow(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(raw) {
		return nil, fmt.Errorf("%s: no PEM certificate: %w", path, syscall.EINVAL)
	}
	return pool, nil
}

// PeerHost is the host name in the certificate a peer presented in a
// finished handshake: who is at the other end.
func PeerHost(st tls.ConnectionState) (string, error) {
	if !st.HandshakeComplete || len(st.VerifiedChains) == 0 || len(st.VerifiedChains[0]) == 0 {
		return "", abi.Errorf(syscall.EACCES, "peer", "no verified certificate")
	}
	leaf := st.VerifiedChains[0][0]
	if err := isHost(leaf); err != nil {
		return "", err
	}
	return leaf.Subject.CommonName, nil
}

// isHost refuses (EACCES) a certificate not made for a cluster host
// (HostRole): etcd's, or one made before the roles were marked, which
// `ctxfs cluster join` makes again.
func isHost(cert *x509.Certificate) error {
	if !slices.Contains(cert.Subject.OrganizationalUnit, HostRole) {
		return abi.Errorf(syscall.EACCES, "peer", "the certificate of %q is not a cluster host's (role %q): only a host's speaks for its users", cert.Subject.CommonName, strings.Join(cert.Subject.OrganizationalUnit, ","))
	}
	return nil
}

// checkHost refuses a host name or address a certificate cannot carry
// cleanly (EINVAL): names are DNS-like, addresses IPs or DNS names.
func checkHost(host string, addrs []string) error {
	if !validDNSName(host) {
		return abi.Errorf(syscall.EINVAL, "host", "invalid host name %q: letters, digits, '-' and '.', at most %d", host, maxHostName)
	}
	for _, a := range addrs {
		if net.ParseIP(a) == nil && !validDNSName(a) {
			return abi.Errorf(syscall.EINVAL, "addr", "invalid address %q: an IP address or a DNS name", a)
		}
	}
	return nil
}

func validDNSName(s string) bool {
	if s == "" || len(s) > maxHostName || strings.HasPrefix(s, ".") || strings.HasSuffix(s, ".") || strings.Contains(s, "..") {
		return false
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.'
		if !ok {
			return false
		}
	}
	return true
}

// newCA makes the cluster CA's key and self-signed certificate.
func newCA() (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "ctxfs cluster CA", Organization: []string{"ctxfs"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true, // it signs hosts only, never another CA
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

// issueInto makes host's key and a certificate for it, for role, signed
// by the CA, keeps the CA's copy of it in caDir (IssuedDir: so it can be
// revoked by the host's name) and then writes both to dir. A certificate
// serves both ways (a host listens and dials; etcd's members talk to each
// other) and can sign nothing.
func issueInto(caDir, dir string, caCert *x509.Certificate, caKey *ecdsa.PrivateKey, host string, addrs []string, role string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := newSerial()
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: host, Organization: []string{"ctxfs"}, OrganizationalUnit: []string{role}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(hostLifetime),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		DNSNames:              []string{host},
	}
	for _, a := range addrs {
		if ip := net.ParseIP(a); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if a != host {
			tmpl.DNSNames = append(tmpl.DNSNames, a)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return err
	}
	if err := keepIssued(caDir, cert); err != nil {
		return err
	}
	if err := writeNew(dir, HostKeyFile, keyPEM(key)); err != nil {
		return err
	}
	return writeNew(dir, HostCertFile, certPEM(der))
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// loadCA reads the CA's certificate and key from caDir.
func loadCA(caDir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	if err := privateDir(caDir, false); err != nil {
		return nil, nil, err
	}
	cert, err := readCert(caDir, CACertFile)
	if err != nil {
		return nil, nil, err
	}
	raw, err := readPrivate(caDir, CAKeyFile)
	if err != nil {
		return nil, nil, err
	}
	block, _ := pem.Decode(raw)
	if block == nil {
		return nil, nil, fmt.Errorf("%s: no PEM key", filepath.Join(caDir, CAKeyFile))
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", filepath.Join(caDir, CAKeyFile), err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, nil, fmt.Errorf("%s: the key is not the certificate's", caDir)
	}
	return cert, key, nil
}

// readCert reads one PEM certificate from dir.
func readCert(dir, name string) (*x509.Certificate, error) {
	raw, err := readPrivate(dir, name)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(raw)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s: no PEM certificate", filepath.Join(dir, name))
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, name), err)
	}
	return cert, nil
}

func keyPEM(key *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		panic(err) // a P-256 key always marshals
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// refuseExisting refuses (EEXIST) a directory holding any of names: a
// cluster's keys are never replaced by a second init or join.
func refuseExisting(dir string, names ...string) error {
	for _, n := range names {
		p := filepath.Join(dir, n)
		if _, err := os.Lstat(p); err == nil {
			return abi.Errorf(syscall.EEXIST, "", "%s exists: ctxfs never replaces a cluster's keys; remove it yourself or name another directory", p)
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}
