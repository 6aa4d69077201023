package trampoline

import (
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The jail's seccomp filter refuses, with EPERM, the system calls that
// reach another process (ptrace, process_vm_writev, pidfd_getfd …), the
// kernel's keyrings, BPF, mounts and namespaces, modules, kexec and the
// like: what an unprivileged program in a PID namespace and a pivoted
// root could still use to reach out, or that only an administrator needs.
// clone3 is ENOSYS, so that a libc falls back to clone, whose flags the
// filter can read (clone3 passes them in memory); clone with a namespace
// flag is EPERM. Everything else is allowed: the filter is a deny list
// that closes known doors cheaply, not a sandbox of its own (the jail's
// root, PID namespace, uid and empty capability sets are).
//
// The filter is classic BPF written out by hand, in the shape of
// bubblewrap's and runc's: check the architecture (a 32-bit system call
// of a 64-bit process has other numbers), refuse the x32 numbers, then one
// comparison per refused number.

// seccomp_data offsets (linux/seccomp.h): nr, arch, instruction_pointer, args[6].
const (
	seccompNr   = 0
	seccompArch = 4
	seccompArg0 = 16 // the low 32 bits of args[0] on a little-endian machine
)

// cloneNamespaces are the clone flags that make a namespace.
const cloneNamespaces = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
	unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// allowedPersonalities are the personality(2) arguments a program may
// pass: the query (0xffffffff) and Linux's own, as in Docker's profile.
var allowedPersonalities = []uint32{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

func stmt(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }

func jump(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
}

var (
	retAllow = stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ALLOW)
	retEPERM = stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM))
	retKill  = stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_KILL_PROCESS)
)

// jailFilter is the jail's filter for this architecture.
func jailFilter() ([]unix.SockFilter, error) {
	if auditArch == 0 {
		return nil, fmt.Errorf("no seccomp filter for this architecture: %w", syscall.ENOTSUP)
	}
	ld := func(off uint32) unix.SockFilter { return stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, off) }
	f := []unix.SockFilter{
		ld(seccompArch),
		jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, auditArch, 1, 0),
		retKill, // another ABI's numbers mean other calls: nothing of it is allowed
		ld(seccompNr),
	}
	if x32Bit != 0 {
		f = append(f, jump(unix.BPF_JMP|unix.BPF_JSET|unix.BPF_K, x32Bit, 0, 1), retEPERM)
	}
	for _, nr := range deniedSyscalls {
		f = append(f, jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, nr, 0, 1), retEPERM)
	}
	enosys := stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS))
	f = append(f, jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, sysClone3, 0, 1), enosys)
	// personality: allowed values jump to the block's allow, the rest EPERM.
	n := uint8(len(allowedPersonalities))
	f = append(f, jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, sysPersonality, 0, n+3), ld(seccompArg0))
	for i, p := range allowedPersonalities {
		f = append(f, jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, p, n-uint8(i), 0))
	}
	f = append(f, retEPERM, retAllow)
	// clone, last: its check replaces the number in the accumulator.
	f = append(f,
		jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, sysClone, 0, 3),
		ld(seccompArg0),
		jump(unix.BPF_JMP|unix.BPF_JSET|unix.BPF_K, cloneNamespaces, 0, 1),
		retEPERM,
		retAllow)
	return f, nil
}

// loadJailFilter loads the filter on the calling thread only (no TSYNC):
// JailMain calls it on the locked thread that then forks the program,
// which inherits it; the jail's init, which only waits, keeps its other
// threads as they were. The thread must have no_new_privs set.
func loadJailFilter() error {
	f, err := jailFilter()
	if err != nil {
		return err
	}
	prog := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	_, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog)))
	if errno != 0 {
		return fmt.Errorf("seccomp: %w", errno)
	}
	return nil
}
