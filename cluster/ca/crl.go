package ca

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
)

// Revocation: a host whose key may have leaked is cut off by the CA's
// certificate revocation list, an X.509 CRL signed with the CA key
// (`ctxfs cluster revoke`, where the CA is). A host adopts a list only
// when the cluster CA signed it and its number is higher than the one it
// holds (Identity.Adopt), so whoever can write where lists are handed
// out (etcd, a copied file) can neither forge one nor bring back an older
// one. A host refuses a peer whose certificate the list names, at every
// handshake, resumed ones included.
//
// The CA keeps a copy of every certificate it issues (IssuedDir), so
// that a host is revoked by its name: every certificate issued to it
// until then. A certificate issued before the CA kept copies is revoked
// by its file.

// Files of revocation, in the CA's directory (and, copied by the admin,
// in a host's: a host that starts while etcd is away still refuses what
// the copy names).
const (
	CRLFile   = "revoked.crl"
	IssuedDir = "issued" // <serial in hex>.crt for every certificate issued
)

// crlLifetime is how long a list says it holds: hosts do not expire a
// list (a revocation never lapses); the field is X.509's.
const crlLifetime = caLifetime

// maxRevoked bounds the certificates one list names (a variable for its
// test).
var maxRevoked = 65536

// revocations is the list a host holds: its number and the serials it
// names.
type revocations struct {
	number  *big.Int
	serials map[string]bool // big.Int.Text(16)
}

// RevokedError says a peer's certificate is on the cluster's list.
type RevokedError struct {
	Host   string
	Serial *big.Int
}

func (e *RevokedError) Error() string {
	return fmt.Sprintf("host %s's certificate (serial %s) is revoked by the cluster CA", e.Host, e.Serial.Text(16))
}

// Errno is EACCES: the peer proved who it is, and that it may not.
func (e *RevokedError) Errno() syscall.Errno { return syscall.EACCES }

// Is makes errors.Is(err, syscall.EACCES) hold.
func (e *RevokedError) Is(target error) bool { return target == syscall.EACCES }

// Revoked says whether cert is on the list this host holds: a
// *RevokedError when it is, else nil.
func (id *Identity) Revoked(cert *x509.Certificate) error {
	r := id.revoked.Load()
	if r == nil || cert == nil || !r.serials[cert.SerialNumber.Text(16)] {
		return nil
	}
	return &RevokedError{Host: cert.Subject.CommonName, Serial: cert.SerialNumber}
}

// verifyPeer refuses a finished handshake whose peer is revoked.
func (id *Identity) verifyPeer(st tls.ConnectionState) error {
	if len(st.PeerCertificates) == 0 {
		return nil // verification proper refuses it
	}
	return id.Revoked(st.PeerCertificates[0])
}

// verifyHost is verifyPeer of a peer that must be a cluster host.
func (id *Identity) verifyHost(st tls.ConnectionState) error {
	if err := id.verifyPeer(st); err != nil || len(st.PeerCertificates) == 0 {
		return err
	}
	return isHost(st.PeerCertificates[0])
}

// CRLNumber is the number of the list this host holds (0: none).
func (id *Identity) CRLNumber() *big.Int {
	if r := id.revoked.Load(); r != nil {
		return new(big.Int).Set(r.number)
	}
	return new(big.Int)
}

// Adopt takes crl (PEM or DER) as this host's list when the cluster CA
// signed it and its number is higher than the one held; it says whether
// it did. A list another key signed, or that does not parse, is an error
// (EINVAL), and changes nothing.
func (id *Identity) Adopt(crl []byte) (bool, error) {
	r, err := parseCRL(crl, id.caCert)
	if err != nil {
		return false, err
	}
	for {
		cur := id.revoked.Load()
		if cur != nil && r.number.Cmp(cur.number) <= 0 {
			return false, nil
		}
		if id.revoked.CompareAndSwap(cur, r) {
			return true, nil
		}
	}
}

// parseCRL reads and checks a list (checkedCRL) into what a host holds.
func parseCRL(raw []byte, caCert *x509.Certificate) (*revocations, error) {
	crl, err := checkedCRL(raw, caCert)
	if err != nil {
		return nil, err
	}
	r := &revocations{number: crl.Number, serials: make(map[string]bool, len(crl.RevokedCertificateEntries))}
	for _, e := range crl.RevokedCertificateEntries {
		r.serials[e.SerialNumber.Text(16)] = true
	}
	return r, nil
}

// checkedCRL parses a list (PEM or DER) signed by caCert, numbered and
// bounded (EINVAL otherwise).
func checkedCRL(raw []byte, caCert *x509.Certificate) (*x509.RevocationList, error) {
	der := raw
	if block, _ := pem.Decode(raw); block != nil {
		if block.Type != "X509 CRL" {
			return nil, abi.Errorf(syscall.EINVAL, "crl", "a PEM %q, not an X509 CRL", block.Type)
		}
		der = block.Bytes
	}
	crl, err := x509.ParseRevocationList(der)
	if err != nil {
		return nil, abi.Errorf(syscall.EINVAL, "crl", "%v", err)
	}
	if err := crl.CheckSignatureFrom(caCert); err != nil {
		return nil, abi.Errorf(syscall.EINVAL, "crl", "not signed by the cluster CA: %v", err)
	}
	if crl.Number == nil || crl.Number.Sign() <= 0 {
		return nil, abi.Errorf(syscall.EINVAL, "crl", "the list has no number")
	}
	if len(crl.RevokedCertificateEntries) > maxRevoked {
		return nil, abi.Errorf(syscall.EINVAL, "crl", "%d certificates, at most %d", len(crl.RevokedCertificateEntries), maxRevoked)
	}
	return crl, nil
}

// loadCRL adopts dir's copy of the list, when there is one.
func (id *Identity) loadCRL(dir string) error {
	raw, err := readCRLFile(dir)
	if raw == nil || err != nil {
		return err
	}
	if _, err := id.Adopt(raw); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(dir, CRLFile), err)
	}
	return nil
}

// readCRLFile is dir's copy of the list, nil when it has none.
func readCRLFile(dir string) ([]byte, error) {
	raw, err := readPrivate(dir, CRLFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return raw, err
}

// Revoke adds to the list in caDir every certificate the CA issued to
// each of hosts (its copies in IssuedDir) and each certificate file in
// certs, signs the list with a number one higher, and writes it to
// caDir/CRLFile (replacing the older list, atomically); it returns the
// new list (PEM) and the serials it added. Revoking nothing new signs
// nothing: the list as it is comes back, for handing out again. A host
// name the CA issued nothing to, or a certificate it did not sign, is
// refused (ENOENT, EINVAL) and nothing is written. With no list yet and
// nothing to revoke, an empty list (number 1) is signed. Two revocations
// at once take turns (a lock on caDir): neither's list loses the other's.
func Revoke(caDir string, hosts, certs []string) (crl []byte, added []*big.Int, err error) {
	caCert, caKey, err := loadCA(caDir)
	if err != nil {
		return nil, nil, err
	}
	unlock, err := lockDir(caDir)
	if err != nil {
		return nil, nil, err
	}
	defer unlock()
	prev, number, entries, err := currentList(caDir, caCert)
	if err != nil {
		return nil, nil, err
	}
	serials, err := toRevoke(caDir, caCert, hosts, certs)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	listed := make(map[string]bool, len(entries))
	for _, e := range entries {
		listed[e.SerialNumber.Text(16)] = true
	}
	for _, s := range serials {
		if !listed[s.Text(16)] {
			listed[s.Text(16)] = true
			entries = append(entries, x509.RevocationListEntry{SerialNumber: s, RevocationTime: now})
			added = append(added, s)
		}
	}
	if len(added) == 0 && prev != nil {
		return prev, nil, nil
	}
	if len(entries) > maxRevoked {
		return nil, nil, abi.Errorf(syscall.ENOSPC, "crl", "%d certificates, at most %d", len(entries), maxRevoked)
	}
	number.Add(number, big.NewInt(1))
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number: number, ThisUpdate: now, NextUpdate: now.Add(crlLifetime), // times unchecked: a revocation never lapses
		RevokedCertificateEntries: entries,
	}, caCert, caKey)
	if err != nil {
		return nil, nil, err
	}
	crl = pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der})
	if err := replaceFile(caDir, CRLFile, crl); err != nil {
		return nil, nil, err
	}
	return crl, added, nil
}

// currentList is caDir's list (nil when none), its number (0 when none)
// and its entries.
func currentList(caDir string, caCert *x509.Certificate) ([]byte, *big.Int, []x509.RevocationListEntry, error) {
	raw, err := readCRLFile(caDir)
	if raw == nil || err != nil {
		return nil, new(big.Int), nil, err
	}
	crl, err := checkedCRL(raw, caCert)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", filepath.Join(caDir, CRLFile), err)
	}
	return raw, crl.Number, crl.RevokedCertificateEntries, nil
}

// toRevoke are the serials hosts and certs name, checked.
func toRevoke(caDir string, caCert *x509.Certificate, hosts, certs []string) ([]*big.Int, error) {
	var serials []*big.Int
	for _, h := range hosts {
		issued, err := issuedTo(caDir, h)
		if err != nil {
			return nil, err
		}
		if len(issued) == 0 {
			return nil, abi.Errorf(syscall.ENOENT, "revoke", "the CA in %s has no certificate of host %q (one issued before it kept copies is revoked by its file: --cert)", caDir, h)
		}
		serials = append(serials, issued...)
	}
	for _, p := range certs {
		cert, err := readCertFile(p)
		if err != nil {
			return nil, err
		}
		if err := cert.CheckSignatureFrom(caCert); err != nil {
			return nil, abi.Errorf(syscall.EINVAL, "revoke", "%s: not a certificate of this CA: %v", p, err)
		}
		serials = append(serials, cert.SerialNumber)
	}
	return serials, nil
}

// issuedTo are the serials of the certificates the CA issued to host.
func issuedTo(caDir, host string) ([]*big.Int, error) {
	dir := filepath.Join(caDir, IssuedDir)
	names, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var serials []*big.Int
	for _, n := range names {
		cert, err := readCert(dir, n.Name())
		if err != nil {
			return nil, err
		}
		if cert.Subject.CommonName == host {
			serials = append(serials, cert.SerialNumber)
		}
	}
	sort.Slice(serials, func(i, j int) bool { return serials[i].Cmp(serials[j]) < 0 })
	return serials, nil
}

// keepIssued writes the CA's copy of a certificate it issued.
func keepIssued(caDir string, cert *x509.Certificate) error {
	dir := filepath.Join(caDir, IssuedDir)
	if err := privateDir(dir, true); err != nil {
		return err
	}
	return writeNew(dir, cert.SerialNumber.Text(16)+".crt", certPEM(cert.Raw))
}

// readCertFile reads a certificate file the admin names (a host's
// host.crt, wherever it was copied): any owner, no symlink.
func readCertFile(p string) (*x509.Certificate, error) {
	raw, err := readNoFollow(p)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(raw)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, abi.Errorf(syscall.EINVAL, "revoke", "%s: no PEM certificate", p)
	}
	return x509.ParseCertificate(block.Bytes)
}
