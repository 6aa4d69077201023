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
