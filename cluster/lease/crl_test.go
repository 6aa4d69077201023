package lease

import (
	"context"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestWatchCRL: a list put through one member reaches another's watch,
// and its read; a list deleted from etcd is sent as "" (which a host
// ignores), and the next list put reaches the watch again.
func TestWatchCRL(t *testing.T) {
	e := testkit.StartEtcd(t, testkit.EtcdOptions{})
	a := join(t, e, "/ctxfs/crl/", "a", testTTL)
	b := join(t, e, "/ctxfs/crl/", "b", testTTL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lists := b.WatchCRL(ctx)
	next := func() string {
		t.Helper()
		select {
		case l := <-lists:
			return l
		case <-time.After(5 * time.Second):
			t.Fatal("no list within 5 s")
			return ""
		}
	}
	if l := next(); l != "" {
		t.Fatalf("first: %q, want none", l)
	}
	testkit.Must(t, a.PublishCRL(ctx, []byte("list 1")))
	if l := next(); l != "list 1" {
		t.Fatalf("after the put: %q", l)
	}
	if l, err := b.CRL(ctx); err != nil || l != "list 1" {
		t.Fatalf("read: %q, %v", l, err)
	}
	if _, err := a.client.Delete(ctx, a.crlKey()); err != nil {
		t.Fatal(err)
	}
	if l := next(); l != "" {
		t.Fatalf("after the delete: %q, want none", l)
	}
	testkit.Must(t, a.PublishCRL(ctx, []byte("list 2")))
	if l := next(); l != "list 2" {
		t.Fatalf("after the second put: %q", l)
	}
	// Another store's list, in the same etcd, is not this one's.
	other := join(t, e, "/ctxfs/other/", "c", testTTL)
	if l, err := other.CRL(ctx); err != nil || l != "" {
		t.Fatalf("another store's list: %q, %v", l, err)
	}
}

// TestSetCRLShown: the number of the list a host holds is in its host
// key for Status, under the same lease (its lease left unchanged), and
// kept when the host registers again after etcd lost its key.
func TestSetCRLShown(t *testing.T) {
	e := testkit.StartEtcd(t, testkit.EtcdOptions{})
	a := join(t, e, "/ctxfs/crlst/", "a", testTTL)
	ctx := context.Background()
	crlOf := func() string {
		t.Helper()
		st, err := a.Status(ctx)
		testkit.Must(t, err)
		if len(st.Hosts) != 1 || st.Hosts[0].TTLLeft <= 0 {
			t.Fatalf("hosts %+v", st.Hosts)
		}
		return st.Hosts[0].CRL
	}
	if n := crlOf(); n != "" {
		t.Fatalf("a new host holds list %q", n)
	}
	testkit.Must(t, a.SetCRL(ctx, "3"))
	if n := crlOf(); n != "3" {
		t.Fatalf("after SetCRL: %q, want 3", n)
	}
	a.mu.Lock()
	id := a.hostLease
	a.mu.Unlock()
	if _, err := a.client.Revoke(ctx, id); err != nil { // as an outage longer than the TTL leaves it
		t.Fatal(err)
	}
	eventuallyHost := time.Now().Add(5 * time.Second)
	for {
		st, err := a.Status(ctx)
		if err == nil && len(st.Hosts) == 1 {
			if st.Hosts[0].CRL != "3" {
				t.Fatalf("registered again without its list: %+v", st.Hosts[0])
			}
			break
		}
		if time.Now().After(eventuallyHost) {
			t.Fatal("not registered again within 5 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
