package ca

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// crlCluster is a CA (alpha's directory) and the directories of hosts
// beta (issued twice: a renewed certificate) and gamma.
type crlCluster struct{ ca, beta, beta2, gamma string }

func newCRLCluster(t *testing.T) crlCluster {
	t.Helper()
	base := t.TempDir()
	c := crlCluster{ca: filepath.Join(base, "ca"), beta: filepath.Join(base, "beta"),
		beta2: filepath.Join(base, "beta2"), gamma: filepath.Join(base, "gamma")}
	testkit.Must(t, Init(c.ca, "alpha", []string{"127.0.0.1"}))
	testkit.Must(t, Issue(c.ca, "beta", []string{"127.0.0.2"}, c.beta))
	testkit.Must(t, Issue(c.ca, "beta", []string{"127.0.0.2"}, c.beta2))
	testkit.Must(t, Issue(c.ca, "gamma", []string{"127.0.0.3"}, c.gamma))
	return c
}

func load(t *testing.T, dir string) *Identity {
	t.Helper()
	id, err := Load(dir)
	testkit.Must(t, err)
	return id
}

// TestRevokeByHostName: revoking beta names every certificate the CA
// issued to it (the renewed one too) and no other host's; a host that
// adopts the list refuses both of beta's, as a *RevokedError with EACCES.
func TestRevokeByHostName(t *testing.T) {
	c := newCRLCluster(t)
	crl, added, err := Revoke(c.ca, []string{"beta"}, nil)
	testkit.Must(t, err)
	if len(added) != 2 {
		t.Fatalf("revoked %d certificates of beta, want 2", len(added))
	}
	wantMode(t, filepath.Join(c.ca, CRLFile), 0o600)
	alpha := load(t, c.ca) // its directory now holds the list: Load adopts it
	if alpha.CRLNumber().Int64() != 1 {
		t.Fatalf("alpha holds list %v, want 1", alpha.CRLNumber())
	}
	gamma := load(t, c.gamma)
	if ok, err := gamma.Adopt(crl); !ok || err != nil {
		t.Fatalf("gamma adopts the list: %v, %v", ok, err)
	}
	for _, dir := range []string{c.beta, c.beta2} {
		err := gamma.Revoked(load(t, dir).cert.Leaf)
		var rev *RevokedError
		if !errors.As(err, &rev) || rev.Host != "beta" {
			t.Fatalf("%s: %v, want beta revoked", dir, err)
		}
		testkit.WantErrno(t, "a revoked peer", err, syscall.EACCES)
	}
	for _, id := range []*Identity{alpha, gamma} {
		if err := gamma.Revoked(id.cert.Leaf); err != nil {
			t.Fatalf("%s revoked: %v", id.Host, err)
		}
	}
}

// TestAdoptOnlyNewerLists: a host keeps the newest list it saw: an older
// one (a copy in etcd put back) and the same one change nothing.
func TestAdoptOnlyNewerLists(t *testing.T) {
	c := newCRLCluster(t)
	first, _, err := Revoke(c.ca, []string{"gamma"}, nil)
	testkit.Must(t, err)
	second, _, err := Revoke(c.ca, []string{"beta"}, nil)
	testkit.Must(t, err)
	alpha := load(t, c.ca)
	if alpha.CRLNumber().Int64() != 2 {
		t.Fatalf("list %v, want 2", alpha.CRLNumber())
	}
	for name, crl := range map[string][]byte{"older": first, "same": second} {
		if ok, err := alpha.Adopt(crl); ok || err != nil {
			t.Fatalf("%s list adopted: %v, %v", name, ok, err)
		}
	}
	for _, dir := range []string{c.beta, c.gamma} { // the second list names both
		if alpha.Revoked(load(t, dir).cert.Leaf) == nil {
			t.Fatalf("%s not revoked", dir)
		}
	}
}

// TestForgedListRefused: a list another CA signed, a certificate given as
// a list, and bytes that are no list are refused (EINVAL) and change
// nothing a host holds.
func TestForgedListRefused(t *testing.T) {
	c, other := newCRLCluster(t), newCRLCluster(t)
	forged, _, err := Revoke(other.ca, []string{"alpha"}, nil) // "alpha" of the other CA
	testkit.Must(t, err)
	beta := load(t, c.beta)
	certPEM, err := os.ReadFile(filepath.Join(c.beta, HostCertFile))
	testkit.Must(t, err)
	block, _ := pem.Decode(forged)
	for name, crl := range map[string][]byte{"another CA's": forged, "another CA's, DER": block.Bytes, "a certificate": certPEM, "junk": []byte("junk")} {
		ok, err := beta.Adopt(crl)
		if ok {
			t.Fatalf("%s list adopted", name)
		}
		testkit.WantErrno(t, name+" list", err, syscall.EINVAL)
	}
	if beta.CRLNumber().Sign() != 0 || beta.Revoked(load(t, c.ca).cert.Leaf) != nil {
		t.Fatal("a refused list changed what beta holds")
	}
	// The same, as a copy in the host's directory: the host does not load.
	testkit.Must(t, os.WriteFile(filepath.Join(c.beta, CRLFile), forged, 0o600))
	if _, err := Load(c.beta); err == nil {
		t.Fatal("a host loaded with another CA's list in its directory")
	}
}

// TestRevokeRefusals: a host the CA issued nothing to (ENOENT) and a
// certificate another CA signed (EINVAL) are refused, and the CA's
// directory is left as it was; revoking nothing new signs nothing.
func TestRevokeRefusals(t *testing.T) {
	c, other := newCRLCluster(t), newCRLCluster(t)
	_, _, err := Revoke(c.ca, []string{"gamma"}, nil)
	testkit.Must(t, err)
	before := testkit.Snapshot(t, c.ca, nil)
	_, _, err = Revoke(c.ca, []string{"delta"}, nil)
	testkit.WantErrno(t, "revoke a host never issued", err, syscall.ENOENT)
	_, _, err = Revoke(c.ca, []string{"beta"}, []string{filepath.Join(other.beta, HostCertFile)})
	testkit.WantErrno(t, "revoke another CA's certificate", err, syscall.EINVAL)
	testkit.Same(t, "refused revocations", before, testkit.Snapshot(t, c.ca, nil))

	again, added, err := Revoke(c.ca, []string{"gamma"}, nil)
	testkit.Must(t, err)
	cur, _ := os.ReadFile(filepath.Join(c.ca, CRLFile))
	if len(added) != 0 || string(again) != string(cur) {
		t.Fatalf("revoking gamma again added %d and gave another list", len(added))
	}
	testkit.Same(t, "revoking nothing new", before, testkit.Snapshot(t, c.ca, nil))
}

// TestRevokeByFile: a certificate the CA kept no copy of (issued before
// it kept them) is revoked by its file.
func TestRevokeByFile(t *testing.T) {
	c := newCRLCluster(t)
	testkit.Must(t, os.RemoveAll(filepath.Join(c.ca, IssuedDir)))
	_, _, err := Revoke(c.ca, []string{"beta"}, nil)
	testkit.WantErrno(t, "revoke by name without copies", err, syscall.ENOENT)
	crl, added, err := Revoke(c.ca, nil, []string{filepath.Join(c.beta, HostCertFile)})
	testkit.Must(t, err)
	alpha := load(t, c.ca)
	beta, beta2 := load(t, c.beta), load(t, c.beta2)
	if len(added) != 1 || alpha.Revoked(beta.cert.Leaf) == nil || alpha.Revoked(beta2.cert.Leaf) != nil {
		t.Fatalf("added %d; beta revoked %v, renewed beta revoked %v", len(added), alpha.Revoked(beta.cert.Leaf), alpha.Revoked(beta2.cert.Leaf))
	}
	parsed, err := x509.ParseRevocationList(mustPEM(t, crl))
	testkit.Must(t, err)
	if parsed.RevokedCertificateEntries[0].SerialNumber.Cmp(beta.cert.Leaf.SerialNumber) != 0 {
		t.Fatal("the list names another serial")
	}
}

func mustPEM(t *testing.T, b []byte) []byte {
	t.Helper()
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatal("no PEM")
	}
	return block.Bytes
}

// TestRevokeConcurrent: revocations made at once each keep the others'
// (they take turns on the CA's directory): the last list names all.
func TestRevokeConcurrent(t *testing.T) {
	c := newCRLCluster(t)
	var hosts []string
	for i := range 8 {
		h := fmt.Sprintf("h%d", i)
		testkit.Must(t, Issue(c.ca, h, []string{"127.0.0.1"}, filepath.Join(t.TempDir(), h)))
		hosts = append(hosts, h)
	}
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Go(func() {
			if _, _, err := Revoke(c.ca, []string{h}, nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	alpha := load(t, c.ca)
	if alpha.CRLNumber().Int64() != int64(len(hosts)) {
		t.Fatalf("list %v after %d revocations", alpha.CRLNumber(), len(hosts))
	}
	for _, h := range hosts {
		if serials, _ := issuedTo(c.ca, h); len(serials) != 1 || alpha.revoked.Load().serials[serials[0].Text(16)] != true {
			t.Fatalf("%s is not on the last list", h)
		}
	}
}

// TestRevokedBound: a revocation that would make the list name more
// certificates than the bound is ENOSPC and writes nothing; a host
// refuses (EINVAL) a list over the bound and holds none.
func TestRevokedBound(t *testing.T) {
	c := newCRLCluster(t)
	_, _, err := Revoke(c.ca, []string{"beta"}, nil) // beta's two certificates
	testkit.Must(t, err)
	defer func(n int) { maxRevoked = n }(maxRevoked)
	maxRevoked = 2
	before := testkit.Snapshot(t, c.ca, nil)
	_, _, err = Revoke(c.ca, []string{"gamma"}, nil)
	testkit.WantErrno(t, "a list past the bound", err, syscall.ENOSPC)
	testkit.Same(t, "a revocation past the bound", before, testkit.Snapshot(t, c.ca, nil))

	maxRevoked = 3
	long, _, err := Revoke(c.ca, []string{"gamma"}, nil)
	testkit.Must(t, err)
	maxRevoked = 2
	gamma := load(t, c.gamma) // its directory holds no list
	ok, err := gamma.Adopt(long)
	testkit.WantErrno(t, "a host given a list past the bound", err, syscall.EINVAL)
	if ok || gamma.CRLNumber().Sign() != 0 {
		t.Fatalf("adopted %v, gamma holds list %v", ok, gamma.CRLNumber())
	}
}
