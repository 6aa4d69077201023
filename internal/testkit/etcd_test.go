package testkit

import (
	"context"
	"fmt"
	"os"
	"os/exec"
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
	e.waitHealthy(1) // a resumed member answers once it has caught up (within 20 s)
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

// A member runs inside a network namespace (nsenter --net) on the URLs
// the test gives, reached from the test's own namespace over a veth pair.
func TestEtcdInNetNS(t *testing.T) {
	RequireEtcd(t)
	if os.Geteuid() != 0 {
		t.Skip("making a network namespace needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("ip (iproute2) missing")
	}
	nn := MakeNetNS(t, "etcd")
	e := StartEtcd(t, EtcdOptions{
		NetNS:      []string{nn.Path},
		ClientURLs: []string{"http://" + nn.NSAddr + ":2379"},
		PeerURLs:   []string{"http://" + nn.NSAddr + ":2380"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	Must(t, e.Healthy(ctx, 0))
	mine, _ := os.Readlink("/proc/self/ns/net")
	its, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", e.PID(0)))
	Must(t, err)
	if its == mine {
		t.Errorf("the member runs in the test's own network namespace (%s)", its)
	}
	e.Pause(0)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel2()
	if e.Healthy(ctx2, 0) == nil {
		t.Error("the paused member answered")
	}
	e.Resume(0)
	e.Restart(0)
}
