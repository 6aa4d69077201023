package layout

import (
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
)

// TestProcStatusOnlyTheCaller: a thread's status gives its groups only to
// a request made with the thread's own filesystem uid and gid. A status
// of other ids is a thread that is not the caller (its id taken by
// another process after the caller's exit): no groups, the tid as pid.
func TestProcStatusOnlyTheCaller(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root: it starts a process of another uid with groups")
	}
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4101, Gid: 4102, Groups: []uint32{4242, 4243}}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	tid := cmd.Process.Pid
	if pid, groups := ProcStatus(tid, 4101, 4102); pid != tid || !slices.Equal(groups, []uint32{4242, 4243}) {
		t.Fatalf("the caller's own ids: pid %d groups %v, want %d [4242 4243]", pid, groups, tid)
	}
	for _, ids := range [][2]uint32{{1001, 4102}, {4101, 1001}, {0, 0}} {
		if pid, groups := ProcStatus(tid, ids[0], ids[1]); pid != tid || groups != nil {
			t.Errorf("a request of uid %d gid %d took the groups of a thread of uid 4101 gid 4102: pid %d groups %v", ids[0], ids[1], pid, groups)
		}
	}
	if pid, groups := ProcStatus(1<<30, 0, 0); pid != 1<<30 || groups != nil {
		t.Errorf("a thread gone: pid %d groups %v", pid, groups)
	}
}
