// Command jailprobe is the program of the jail escape tests: a static
// binary that runs in a chroot-isolated run and reports, one JSON object
// per line on stdout, what it can reach of the host. Its input (stdin) is
// a host pid to try and, optionally, the word "hold": then it stays until
// the run is cancelled, so that a test can look at it from outside.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// scanLimit is how far the pid scan goes: every pid a fresh namespace
// hands out in a test, and far beyond.
const scanLimit = 1 << 15

func main() {
	in, _ := io.ReadAll(os.Stdin)
	fields := strings.Fields(string(in))
	report := map[string]any{"getpid": os.Getpid()}
	if len(fields) > 0 {
		if pid, err := strconv.Atoi(fields[0]); err == nil {
			tryHost(pid, report)
		}
	}
	report["pids"] = visiblePids()
	report["unshare_user"] = errName(unix.Unshare(unix.CLONE_NEWUSER))
	report["mount"] = errName(unix.Mount("none", "/nonexistent-jailprobe", "tmpfs", 0, ""))
	out, _ := json.Marshal(report)
	fmt.Printf("%s\n", out)
	if len(fields) > 1 && fields[1] == "hold" {
		time.Sleep(10 * time.Minute)
	}
}

// tryHost reports what kill(pid, 0), PTRACE_ATTACH and process_vm_writev
// on pid say.
func tryHost(pid int, report map[string]any) {
	report["kill"] = errName(unix.Kill(pid, 0))
	err := unix.PtraceAttach(pid)
	if err == nil { // let go at once: wait for the stop, detach, let it run
		var ws unix.WaitStatus
		unix.Wait4(pid, &ws, unix.WALL, nil)
		unix.PtraceDetach(pid)
		unix.Kill(pid, unix.SIGCONT)
	}
	report["ptrace"] = errName(err)
	b := []byte("x")
	local := []unix.Iovec{{Base: &b[0], Len: 1}}
	remote := []unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&b[0])), Len: 1}}
	_, err = unix.ProcessVMWritev(pid, local, remote, 0)
	report["process_vm_writev"] = errName(err)
}

// visiblePids are the processes that signal 0 finds (or is refused: EPERM
// also says the process exists). tgkill(pid, pid) names a thread group's
// leader only: kill(tid, 0) also finds every other thread of a process.
func visiblePids() []int {
	var pids []int
	for pid := 1; pid < scanLimit; pid++ {
		if err := unix.Tgkill(pid, pid, 0); err == nil || err == syscall.EPERM {
			pids = append(pids, pid)
		}
	}
	return pids
}

func errName(err error) string {
	if err == nil {
		return "ok"
	}
	if e, ok := err.(syscall.Errno); ok {
		return unix.ErrnoName(e)
	}
	return err.Error()
}
