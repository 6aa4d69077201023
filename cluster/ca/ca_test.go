package ca

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestInitMakesPrivateFiles: init makes the CA and the host's
// certificate, 0600 in a 0700 directory; the identity loads with the
// host's name; a second init refuses (EEXIST) and changes nothing.
func TestInitMakesPrivateFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	testkit.Must(t, Init(dir, "alpha", []string{"127.0.0.1", "alpha.example"}))
	wantMode(t, dir, 0o700|os.ModeDir)
	for _, f := range []string{CACertFile, CAKeyFile, HostCertFile, HostKeyFile} {
		wantMode(t, filepath.Join(dir, f), 0o600)
	}
	id, err := Load(dir)
	testkit.Must(t, err)
	if id.Host != "alpha" {
		t.Fatalf("host %q, want alpha", id.Host)
	}
	leaf := id.cert.Leaf
	if len(leaf.IPAddresses) != 1 || leaf.IPAddresses[0].String() != "127.0.0.1" || leaf.IsCA {
		t.Fatalf("host certificate: IPs %v, DNS %v, CA %v", leaf.IPAddresses, leaf.DNSNames, leaf.IsCA)
	}
	before := testkit.Snapshot(t, dir, nil)
	testkit.WantErrno(t, "second init", Init(dir, "alpha", nil), syscall.EEXIST)
	testkit.Same(t, "second init", before, testkit.Snapshot(t, dir, nil))
}

// TestIssueLeavesTheCAKey: join's files hold the CA's certificate and the
// new host's, never the CA key, and load as that host, trusting the
// same CA; a second issue into the same directory refuses.
func TestIssueLeavesTheCAKey(t *testing.T) {
	base := t.TempDir()
	caDir, out := filepath.Join(base, "ca"), filepath.Join(base, "beta")
	testkit.Must(t, Init(caDir, "alpha", []string{"127.0.0.1"}))
	testkit.Must(t, Issue(caDir, "beta", []string{"127.0.0.2"}, out))
	if _, err := os.Lstat(filepath.Join(out, CAKeyFile)); !os.IsNotExist(err) {
		t.Fatalf("the CA key was copied out: %v", err)
	}
	wantMode(t, out, 0o700|os.ModeDir)
	for _, f := range []string{CACertFile, HostCertFile, HostKeyFile} {
		wantMode(t, filepath.Join(out, f), 0o600)
	}
	a, err := Load(caDir)
	testkit.Must(t, err)
	b, err := Load(out)
	testkit.Must(t, err)
	if b.Host != "beta" {
		t.Fatalf("host %q, want beta", b.Host)
	}
	if _, err := b.cert.Leaf.Verify(x509.VerifyOptions{Roots: a.pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("beta's certificate does not chain to alpha's CA: %v", err)
	}
	testkit.WantErrno(t, "second issue", Issue(caDir, "beta", nil, out), syscall.EEXIST)
}

// TestDirectoryOthersCanChangeRefused: a cluster directory of another
// uid, one its group can write, and one under a directory every user can
// write (not sticky) are refused with EACCES, and nothing is written in
// them.
func TestDirectoryOthersCanChangeRefused(t *testing.T) {
	base := t.TempDir()
	theirs := filepath.Join(base, "theirs")
	testkit.Must(t, os.Mkdir(theirs, 0o700))
	testkit.Must(t, os.Chown(theirs, 1001, 1001))
	groupWritable := filepath.Join(base, "group")
	testkit.Must(t, os.Mkdir(groupWritable, 0o700))
	testkit.Must(t, os.Chmod(groupWritable, 0o770))
	open := filepath.Join(base, "open")
	testkit.Must(t, os.Mkdir(open, 0o700))
	testkit.Must(t, os.Chmod(open, 0o777))
	under := filepath.Join(open, "ca")

	for _, dir := range []string{theirs, groupWritable, under} {
		before := testkit.Snapshot(t, base, nil)
		testkit.WantErrno(t, "init in "+dir, Init(dir, "alpha", nil), syscall.EACCES)
		testkit.Same(t, "init in "+dir, before, testkit.Snapshot(t, base, nil))
	}
	good := filepath.Join(base, "good")
	testkit.Must(t, Init(good, "alpha", nil))
	before := testkit.Snapshot(t, base, nil)
	testkit.WantErrno(t, "issue into "+theirs, Issue(good, "beta", nil, theirs), syscall.EACCES)
	testkit.Same(t, "issue into "+theirs, before, testkit.Snapshot(t, base, nil))
	testkit.Must(t, os.Chmod(good, 0o770))
	_, err := Load(good)
	testkit.WantErrno(t, "load from a group-writable directory", err, syscall.EACCES)
}

// TestLoadRefusesExposedFiles: a key others can read, a certificate of
// another uid, and a symlink in place of a file are refused.
func TestLoadRefusesExposedFiles(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "ca")
	testkit.Must(t, Init(dir, "alpha", nil))
	key := filepath.Join(dir, HostKeyFile)

	testkit.Must(t, os.Chmod(key, 0o644))
	_, err := Load(dir)
	testkit.WantErrno(t, "load with a readable key", err, syscall.EACCES)
	testkit.Must(t, os.Chmod(key, 0o600))

	cert := filepath.Join(dir, HostCertFile)
	testkit.Must(t, os.Chown(cert, 1001, 1001))
	_, err = Load(dir)
	testkit.WantErrno(t, "load with another uid's certificate", err, syscall.EACCES)
	testkit.Must(t, os.Chown(cert, 0, 0))

	moved := filepath.Join(base, "key")
	testkit.Must(t, os.Rename(key, moved))
	testkit.Must(t, os.Symlink(moved, key))
	_, err = Load(dir)
	testkit.WantErrno(t, "load through a symlink", err, syscall.ELOOP)
}

// TestBadNamesRefused: a host name or address a certificate could not
// carry cleanly is EINVAL, and nothing is made.
func TestBadNamesRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	testkit.WantErrno(t, "host with a slash", Init(dir, "a/b", nil), syscall.EINVAL)
	testkit.WantErrno(t, "address with a space", Init(dir, "a", []string{"1.2.3.4 x"}), syscall.EINVAL)
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Fatalf("a refused init made %s: %v", dir, err)
	}
}

func wantMode(t *testing.T, p string, want os.FileMode) {
	t.Helper()
	st, err := os.Lstat(p)
	testkit.Must(t, err)
	if st.Mode() != want {
		t.Errorf("%s: mode %v, want %v", p, st.Mode(), want)
	}
}
