package testkit

import (
	"context"
	"testing"
	"time"
)

// A 3-member cluster forms; a paused member stops answering and answers
// again when resumed; a killed member comes back on its data directory;
// two members stopped leave the third without a leader.
func TestEtcdCluster(t *testing.T) {
	e := StartEtcd(t, EtcdOptions{Members: 3})
	if got := len(e.Endpoints()); got != 3 {
		t.Fatalf("%d endpoints, want 3", got)
	}
	healthy := func(i int) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return e.Healthy(ctx, i)
	}
	for i := range 3 {
		Must(t, healthy(i))
	}
	e.Pause(1)
	if healthy(1) == nil {
		t.Error("a paused member answered its health check")
	}
	e.Resume(1)
	Must(t, healthy(1))
	e.Kill(2)
	if healthy(2) == nil {
		t.Error("a killed member answered its health check")
	}
	e.Restart(2)
	Must(t, healthy(2))
	e.Stop(1)
	e.Stop(2)
	deadline := time.Now().Add(5 * time.Second)
	for healthy(0) == nil {
		if time.Now().After(deadline) {
			t.Fatal("member 0 still healthy 5 s after losing its quorum")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
