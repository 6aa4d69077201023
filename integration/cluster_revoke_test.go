package integration

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/cluster/ca"
	"github.com/ctxfs/ctxfs/cluster/peer"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestClusterRevokedHost: `ctxfs cluster revoke --host F --cluster …`,
// run where the CA is, cuts host F off while both hosts run: within a
// second the writer refuses F's relays (a send to F's socket, a request
// written to F's ctl file, and a dial with F's key by anyone who took a
// copy of it: EACCES, writing nothing); the writer's own sends go on;
// `ctxfs cluster status` shows the list, and each host the number of the
// list it holds. A list in etcd that another CA
// signed changes nothing a host holds. etcd here serves https to the
// cluster's certificates alone, so the list is handed out over TLS.
func TestClusterRevokedHost(t *testing.T) {
	c := newClusterWith(t, clusterMade{ttl: 2 * time.Second, etcdTLS: true}, "a", "b")
	w := c.waitWriter("", 20*time.Second)
	f := c.follower(w)
	f.srv.sendAs(uid1001, "v", "v0", "", "before the revocation")

	// A forged list (another CA's, naming F) put in etcd by whoever can
	// write there is refused.
	forger := t.TempDir() + "/ca"
	if out, err := runCmd(t, nil, nil, ctxfsBin, "cluster", "init", "--dir", forger, "--host", f.name, "--addr", f.net.addr); err != nil {
		t.Fatalf("another CA: %v %s", err, out)
	}
	forged, _, err := ca.Revoke(forger, []string{f.name}, nil)
	testkit.Must(t, err)
	c.etcdPut("/ctxfs/ctxfs/crl", string(forged))
	eventually(t, 5*time.Second, "both hosts refusing the forged list", func() bool {
		return strings.Contains(w.srv.logText(), "revocation list in etcd is refused") &&
			strings.Contains(f.srv.logText(), "revocation list in etcd is refused")
	})
	f.srv.sendAs(uid1001, "v", "v1", "", "a forged list changes nothing")

	out, err := runCmd(t, nil, nil, ctxfsBin, append([]string{"cluster", "revoke", "--ca", c.hosts[0].certs, "--host", f.name}, c.etcdArgs()[:2]...)...)
	if err != nil || !strings.Contains(out, "1 certificate revoked") {
		t.Fatalf("ctxfs cluster revoke: %v %s", err, out)
	}
	refused := func(raw string, err error) bool { return err == nil && strings.Contains(raw, `"code":"EACCES"`) }
	eventually(t, 2*time.Second, "the revoked host's send refused", func() bool {
		_, raw, err := f.srv.requestAs(uid1001, "coder", `{"op":"send","id":"v2","session":"v","input":"cut off"}`)
		return refused(raw, err)
	})
	settle()
	before := hostSnapshot(t, c.store)
	_, raw, err := f.srv.requestAs(uid1001, "coder", `{"op":"send","id":"v3","session":"v","input":"cut off"}`)
	if !refused(raw, err) || !strings.Contains(raw, "revoked") {
		t.Errorf("a send to the revoked host's socket: %v %s, want EACCES saying revoked", err, raw)
	}
	ctl := f.srv.mnt(uid1001CoderAt + "v/ctl")
	if out, err := bashAs(t, uid1001, `printf '%s\n' '{"op":"send","id":"v4","input":"cut off"}' > `+ctl); err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("a request to the revoked host's ctl file: %v %q, want EACCES", err, out)
	}
	id, err := ca.Load(f.certs) // its key, as whoever copied it holds it
	testkit.Must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = peer.Dial(ctx, w.peerAddr(), id, peer.Hello{Uid: 1001, Gid: 1001, Kind: "agent", Owner: "coder"})
	testkit.WantErrno(t, "a dial with the revoked host's key", err, syscall.EACCES, "revoked")
	if diffs, _ := hostDiffs(before, hostSnapshot(t, c.store)); len(diffs) > 0 {
		t.Errorf("the revoked host's requests changed the store:\n%s", strings.Join(diffs, "\n"))
	}

	w.srv.sendAs(uid1001, "v", "v5", "", "the writer goes on")
	if got := fileBytes(t, w.srv.mnt(uid1001CoderAt+"v/messages.jsonl")); strings.Contains(got, "cut off") ||
		strings.Count(got, `"content":"the writer goes on"`) != 1 {
		t.Errorf("the session after the revocation:\n%s", got)
	}
	if out, _ := c.status(); !strings.Contains(out, "revocation list in etcd: number 1, 1 certificate") {
		t.Errorf("cluster status does not show the list:\n%s", out)
	}
	eventually(t, 2*time.Second, "every host showing list 1 in cluster status", func() bool {
		out, _ := c.status()
		held := map[string]bool{}
		for _, line := range strings.Split(out, "\n") {
			if col := strings.Fields(line); len(col) >= 5 && col[4] == "1" { // HOST ADDRESS PID LEASE-LEFT CRL ROLE…
				held[col[0]] = true
			}
		}
		return held[w.name] && held[f.name]
	})
}

// TestClusterOverTLSEtcd: an etcd that serves https and lets in only
// certificates of the cluster's CA: the hosts join with theirs, one
// writes, a send through the other is relayed; `ctxfs cluster status`
// reaches etcd with --cluster-certs, and without a certificate etcd
// knows it cannot (exit 69: etcd unavailable, as it is to a stranger).
func TestClusterOverTLSEtcd(t *testing.T) {
	c := newClusterWith(t, clusterMade{ttl: 2 * time.Second, etcdTLS: true}, "a", "b")
	w := c.waitWriter("", 20*time.Second)
	c.follower(w).srv.sendAs(uid1001, "t", "t0", "", "relayed, etcd over https")
	if out, code := c.status(); code != 0 || !strings.Contains(out, "writer: "+w.name) {
		t.Fatalf("status over https: exit %d\n%s", code, out)
	}
	stranger := filepath.Join(t.TempDir(), "stranger")
	if out, err := runCmd(t, nil, nil, ctxfsBin, "cluster", "init", "--dir", stranger, "--host", "mallory", "--addr", "127.0.0.1"); err != nil {
		t.Fatalf("another CA: %v %s", err, out)
	}
	eps := strings.Join(c.etcd.Endpoints(), ",")
	out, err := runCmd(t, nil, nil, ctxfsBin, "cluster", "status", "--cluster", eps, "--cluster-certs", stranger)
	if code := exitCode(t, err); code != 69 || strings.Contains(out, "writer: ") {
		t.Errorf("status with another CA's certificate: exit %d, want 69\n%s", code, out)
	}
	out, err = runCmd(t, nil, nil, ctxfsBin, "cluster", "status", "--cluster", strings.ReplaceAll(eps, "https://", "http://"))
	if code := exitCode(t, err); code != 69 {
		t.Errorf("status in plain http to the https etcd: exit %d, want 69\n%s", code, out)
	}
}
