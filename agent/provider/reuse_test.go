package provider

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/agent/modelapi"
)

// TestStreamReusesConnection: runs one after another to one provider go
// over one connection (a real provider's TLS handshake is a round trip or
// two and its crypto, at every run otherwise): a reply read to the API's
// end of stream is read on to the body's end, whose last chunk comes
// apart (over TLS, even a handler's that returns at once after its last
// flush: BenchmarkStreamsInTurn), so the transport keeps the connection.
func TestStreamReusesConnection(t *testing.T) {
	forEachAPI(t, func(t *testing.T, a apiCase) {
		reply := streamOf(a.stream("hel", "lo")...)
		srv, conns := countingConns(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reply(w, r)
			time.Sleep(5 * time.Millisecond) // the last chunk comes after the last event
		}))
		srv.Start()
		t.Cleanup(srv.Close)
		req := hello
		req.Owner.Uid = ownUid(t) // a transport of its own: other tests' connections do not push its out
		for i := range 5 {
			pieces, res, err := collect(context.Background(), configFor(a.api, srv.URL), req)
			if err != nil || res.Text != "hello" || len(pieces) == 0 {
				t.Fatalf("stream %d: %v, %q", i, err, res.Text)
			}
			drained(t, req.Owner.Uid)
		}
		// One; two where a loaded machine let a body's end come later
		// than drainWait once. Closed at the end of stream, each its own.
		if n := conns.Load(); n > 2 {
			t.Fatalf("5 streams one after another opened %d connections, want 1", n)
		}
	})
}

// TestConnectionsPerUid: one uid's runs never go over a connection
// another uid's opened (whether one is kept would tell a user that
// someone used the provider lately).
func TestConnectionsPerUid(t *testing.T) {
	srv, conns := countingConns(streamOf(openAICase.stream("hi")...))
	srv.Start()
	t.Cleanup(srv.Close)
	for i, uid := range []uint32{ownUid(t), ownUid(t), 0} {
		req := hello
		req.Owner.Uid = uid
		if _, _, err := collect(context.Background(), configFor(modelapi.OpenAIChat, srv.URL), req); err != nil {
			t.Fatal(err)
		}
		drained(t, uid)
		if n := conns.Load(); n != int32(i+1) {
			t.Fatalf("after runs of %d uids the provider saw %d connections", i+1, n)
		}
	}
}

// countingConns is an unstarted server of h and the count of the
// connections it has accepted.
func countingConns(h http.Handler) (*httptest.Server, *atomic.Int32) {
	conns := new(atomic.Int32)
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	return srv, conns
}

var lastUid atomic.Uint32

// ownUid is a uid no other test's requests use.
func ownUid(t *testing.T) uint32 { return 1<<20 + lastUid.Add(1) }

// drained waits until uid's replies are read to their end (or given up).
func drained(t *testing.T, uid uint32) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		n := drains.Held(uid)
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("uid %d still reads %d replies on", uid, n)
		}
	}
}

// TestDrainIsBounded: a provider that keeps a reply's body open after the
// API's end of stream, or sends on without end, has the run's result at
// once and loses the connection within drainWait; nothing waits on it.
func TestDrainIsBounded(t *testing.T) {
	for _, tail := range []string{"open", "endless"} {
		t.Run(tail, func(t *testing.T) {
			forEachAPI(t, func(t *testing.T, a apiCase) {
				release := make(chan struct{})
				closed := make(chan struct{}, 4)
				reply := streamOf(a.stream("hel", "lo")...)
				srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					reply(w, r)
					for tail == "endless" {
						if _, err := w.Write([]byte(": more\n\n")); err != nil {
							return
						}
						w.(http.Flusher).Flush()
					}
					select { // the client's close cancels the request's context
					case <-release:
					case <-r.Context().Done():
					}
				}))
				srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
					if s == http.StateClosed || s == http.StateHijacked {
						closed <- struct{}{}
					}
				}
				srv.Start()
				t.Cleanup(srv.Close)
				t.Cleanup(func() { close(release) })
				if _, res, err := collect(context.Background(), configFor(a.api, srv.URL), hello); err != nil || res.Text != "hello" {
					t.Fatalf("stream: %v, %q", err, res.Text)
				}
				select {
				case <-closed:
				case <-time.After(50 * drainWait): // a loaded machine's margin
					t.Fatalf("the connection of a reply whose body goes on was not closed within %v", 50*drainWait)
				}
			})
		})
	}
}

// TestDrainsPerUid: one uid reads on at most drainsPerUid replies at once;
// another uid's are its own; a drain given back is free again.
func TestDrainsPerUid(t *testing.T) {
	d := newDrains()
	for i := range drainsPerUid {
		if err := d.Take(1000); err != nil {
			t.Fatalf("drain %d of uid 1000: %v, want %d taken", i+1, err, drainsPerUid)
		}
	}
	if d.Take(1000) == nil {
		t.Fatalf("uid 1000 took a drain past its %d", drainsPerUid)
	}
	if err := d.Take(1001); err != nil {
		t.Fatalf("uid 1000's drains took uid 1001's: %v", err)
	}
	d.Give(1000)
	if err := d.Take(1000); err != nil {
		t.Fatalf("a drain given back was not free again: %v", err)
	}
	for range drainsPerUid {
		d.Give(1000)
	}
	d.Give(1001)
	if d.Held(1000) != 0 || d.Held(1001) != 0 {
		t.Fatalf("every drain given back, the count still holds %d and %d", d.Held(1000), d.Held(1001))
	}
}

// TestTransportsBounded: the transports of at most maxTransports uids are
// kept; a uid's transport is the same from one request to the next while
// it is kept.
func TestTransportsBounded(t *testing.T) {
	const first = 1 << 20 // uids of this test's own, forgotten at its end
	t.Cleanup(func() {
		transports.Lock()
		defer transports.Unlock()
		for uid := range transports.byUid {
			if uid >= first {
				delete(transports.byUid, uid)
			}
		}
	})
	if one, two := transportFor(first), transportFor(first); one != two {
		t.Fatal("a uid's transport changed between two requests")
	}
	for uid := uint32(first); uid < first+maxTransports+50; uid++ {
		transportFor(uid)
	}
	transports.Lock()
	n := len(transports.byUid)
	transports.Unlock()
	if n > maxTransports {
		t.Errorf("%d transports kept, at most %d", n, maxTransports)
	}
}
