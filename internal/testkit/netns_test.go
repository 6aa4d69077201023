package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

// RemoveDeadNetNS removes the namespace whose name carries the PID of a
// process that has ended, killing what still runs in it, and leaves the
// one of a running process (this one), and one whose name is not a test
// run's.
func TestRemoveDeadNetNS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: network namespaces need CAP_SYS_ADMIN")
	}
	ended := EndedPID(t)
	dead := fmt.Sprintf("ctxfs-sweep-%d-1", ended)
	live := "ctxfs-sweep-" + NetNSID(9999) + "-host"
	other := fmt.Sprintf("ctxfs-sweep-%d", ended) // no counter: not NetNSID's
	for _, ns := range []string{dead, live, other} {
		if out, err := ipRun("netns", "add", ns); err != nil {
			t.Fatalf("ip netns add %s: %v\n%s", ns, err, out)
		}
		t.Cleanup(func() { ipRun("netns", "del", ns) })
	}
	// A daemon of the dead run, left in its namespace.
	inDead := exec.Command("nsenter", "--net=/run/netns/"+dead, "sleep", "600")
	Must(t, inDead.Start())
	t.Cleanup(func() { inDead.Process.Kill() })
	if removed := RemoveDeadNetNS(); !slices.Contains(removed, dead) || slices.Contains(removed, live) || slices.Contains(removed, other) {
		t.Errorf("removed %v; want %s among them, and neither %s nor %s", removed, dead, live, other)
	}
	for ns, want := range map[string]bool{dead: false, live: true, other: true} {
		if _, err := os.Stat("/run/netns/" + ns); (err == nil) != want {
			t.Errorf("/run/netns/%s: %v; want it there: %v", ns, err, want)
		}
	}
	waited := make(chan error, 1)
	go func() { waited <- inDead.Wait() }()
	select {
	case err := <-waited:
		if err == nil || inDead.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("the process in the dead run's namespace: %v, want killed by SIGKILL", err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("the process in the dead run's namespace still runs 10 s after the sweep")
	}
}
