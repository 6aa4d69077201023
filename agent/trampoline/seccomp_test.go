package trampoline

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// seccompChildEnv makes the test binary the child of TestJailFilter.
const seccompChildEnv = "CTXFS_TEST_SECCOMP_CHILD"

// TestJailFilter runs the test binary again with the jail's filter
// loaded on its locked thread, and checks what each kind of call gets.
// The calls are made so that without the filter they would fail in
// another way (or do nothing), never succeed in something harmful.
func TestJailFilter(t *testing.T) {
	if auditArch == 0 {
		t.Skip("no filter on this architecture")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestJailFilterChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), seccompChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	want := map[string]string{
		"getpid": "ok", "personality-query": "ok",
		"ptrace": "EPERM", "process_vm_writev": "EPERM", "keyctl": "EPERM", "bpf": "EPERM",
		"unshare-user": "EPERM", "mount": "EPERM", "clone-newuser": "EPERM", "clone3": "ENOSYS",
		"personality-change": "EPERM", "x32-getpid": "EPERM", "setns": "EPERM",
	}
	got := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			got[k] = v
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s under the jail's filter: %q, want %s", k, got[k], v)
		}
	}
}

// TestJailFilterChild is the child of TestJailFilter.
func TestJailFilterChild(t *testing.T) {
	if os.Getenv(seccompChildEnv) == "" {
		t.Skip("run by TestJailFilter")
	}
	runtime.LockOSThread() // the filter is this thread's; so are the calls below
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := loadJailFilter(); err != nil {
		t.Fatal(err)
	}
	call := func(name string, trap uintptr, a ...uintptr) {
		a = append(a, 0, 0, 0, 0, 0, 0)
		_, _, e := unix.RawSyscall6(trap, a[0], a[1], a[2], a[3], a[4], a[5])
		res := "ok"
		if e != 0 {
			res = unix.ErrnoName(e)
		}
		fmt.Printf("%s=%s\n", name, res)
	}
	call("getpid", unix.SYS_GETPID)
	call("personality-query", unix.SYS_PERSONALITY, 0xffffffff)
	call("personality-change", unix.SYS_PERSONALITY, 0x0040000) // ADDR_NO_RANDOMIZE
	call("ptrace", unix.SYS_PTRACE, unix.PTRACE_PEEKDATA, 1, 0)
	call("process_vm_writev", unix.SYS_PROCESS_VM_WRITEV, 1, 0, 0, 0, 0, 0)
	call("keyctl", unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, 0xfffffffc, 0) // the session keyring
	call("bpf", unix.SYS_BPF, 0xffff, 0, 0)
	call("unshare-user", unix.SYS_UNSHARE, unix.CLONE_NEWUSER)
	call("setns", unix.SYS_SETNS, 0xffff, 0)
	call("mount", unix.SYS_MOUNT, 0, 0, 0, 0, 0)
	// Without the filter: EINVAL (a thread without shared signal handlers).
	call("clone-newuser", unix.SYS_CLONE, unix.CLONE_NEWUSER|unix.CLONE_THREAD)
	call("clone3", unix.SYS_CLONE3, 0, 0)
	call("x32-getpid", x32Bit|unix.SYS_GETPID)
}
