package peer

import (
	"context"
	"net"
	"testing"
	"time"
)

// Anyone who can reach the port, with no certificate, may hold every
// handshake place with connections that say nothing: a peer that comes
// then is still admitted (the stranger that came first is closed for
// it), and so is the next after it.
func TestStrangersMakeRoomForPeers(t *testing.T) {
	c := newCluster(t)
	l, _ := echoListener(t, c.alpha)
	var idle []net.Conn
	t.Cleanup(func() {
		for _, conn := range idle {
			conn.Close()
		}
	})
	for range maxHandshakes {
		conn, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, conn)
	}
	time.Sleep(200 * time.Millisecond) // every stranger accepted and waiting
	for i := range 2 {
		conn, err := DialHost(context.Background(), "alpha", l.Addr().String(), c.beta, testHello())
		if err != nil {
			t.Fatalf("peer %d, with %d strangers holding every place: %v", i, maxHandshakes, err)
		}
		conn.Close()
	}
	// The first strangers were closed for the peers.
	idle[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := idle[0].Read(make([]byte, 1)); err == nil {
		t.Error("the first stranger's connection is still open")
	}
}
