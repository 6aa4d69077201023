package trampoline

import "golang.org/x/sys/unix"

// auditArch is what seccomp_data.arch holds for this process's own ABI.
const auditArch = unix.AUDIT_ARCH_X86_64

// x32Bit marks the x32 ABI's system call numbers (__X32_SYSCALL_BIT): the
// same architecture value, other calls behind the numbers.
const x32Bit = 0x40000000

const (
	sysClone       = unix.SYS_CLONE
	sysClone3      = unix.SYS_CLONE3
	sysPersonality = unix.SYS_PERSONALITY
)

// deniedSyscalls fail with EPERM in a jail (see jailFilter).
var deniedSyscalls = []uint32{
	// other processes
	unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV, unix.SYS_PIDFD_GETFD,
	unix.SYS_PIDFD_OPEN, unix.SYS_KCMP, unix.SYS_PROCESS_MADVISE, unix.SYS_MOVE_PAGES, unix.SYS_MIGRATE_PAGES,
	// keyrings, BPF, page-fault handling, performance counters, io_uring (whose operations pass no filter)
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY, unix.SYS_BPF, unix.SYS_USERFAULTFD,
	unix.SYS_PERF_EVENT_OPEN, unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
	// mounts and namespaces
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_CHROOT, unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE,
	unix.SYS_FSOPEN, unix.SYS_FSMOUNT, unix.SYS_FSCONFIG, unix.SYS_FSPICK, unix.SYS_MOUNT_SETATTR,
	unix.SYS_SETNS, unix.SYS_UNSHARE, unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NAME_TO_HANDLE_AT,
	// the machine's own business
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD, unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE,
	unix.SYS_DELETE_MODULE, unix.SYS_ACCT, unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_REBOOT,
	unix.SYS_IOPL, unix.SYS_IOPERM, unix.SYS_QUOTACTL, unix.SYS_LOOKUP_DCOOKIE, unix.SYS_SYSLOG,
	unix.SYS_VHANGUP, unix.SYS_USELIB, unix.SYS__SYSCTL, unix.SYS_SETTIMEOFDAY, unix.SYS_CLOCK_SETTIME,
	unix.SYS_CLOCK_ADJTIME, unix.SYS_ADJTIMEX, unix.SYS_NFSSERVCTL,
}
