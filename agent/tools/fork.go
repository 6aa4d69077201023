package tools

import (
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
)

// The runtime's fork hooks, as package syscall uses them: before the fork
// the calling thread blocks every signal and no goroutine may be
// preempted; in the child, the signal handlers are reset and the mask is
// restored; in the parent, both are undone. (Linked the way gVisor links
// them: the runtime keeps them for that, go.dev/issue/67401.)
//
//go:linkname runtimeBeforeFork syscall.runtime_BeforeFork
func runtimeBeforeFork()

//go:linkname runtimeAfterFork syscall.runtime_AfterFork
func runtimeAfterFork()

//go:linkname runtimeAfterForkInChild syscall.runtime_AfterForkInChild
func runtimeAfterForkInChild()

// childFailed is the exit status of a child that could not exec; the
// parent reports the errno it wrote instead.
const childFailed = 127

// forkExec starts prog with argv and env, stdin from /dev/null and stdout
// and stderr on the given files, in this process's group, killed when
// this process dies (PDEATHSIG), with no_new_privs (nothing it runs gains
// a privilege: a set-user-id program cannot put itself out of reach of
// the kill), a soft RLIMIT_NOFILE below the one the runtime raised for
// this process (commandNofile) and, when nproc is not 0, RLIMIT_NPROC at
// nproc, soft and hard. All of it is set in the child between fork and exec, so it holds
// from the program's first instruction, and never for this process,
// whose runtime must still start a thread while a fork bomb fills the
// uid's count. (Package syscall's ForkExec sets no resource limit: a
// fork of its own, in the shape of syscall.forkAndExecInChild, does it
// without a second exec.) It returns once the program runs, or with the
// errno of its exec.
func forkExec(prog string, argv, env []string, stdout, stderr *os.File, nproc uint64) (int, error) {
	argv0, err := syscall.BytePtrFromString(prog)
	if err != nil {
		return 0, err
	}
	argvp, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return 0, err
	}
	envp, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		return 0, err
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return 0, err
	}
	defer null.Close()
	var pipe [2]int
	if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC); err != nil {
		return 0, err
	}
	defer unix.Close(pipe[0])
	fds := [3]int{int(null.Fd()), int(stdout.Fd()), int(stderr.Fd())}
	for _, fd := range fds {
		if fd <= 2 { // dup3 onto 0..2 in order would overwrite it
			unix.Close(pipe[1])
			return 0, abi.Errorf(syscall.EBADF, ShellExec, "a command's stream is descriptor %d", fd)
		}
	}
	nofile := commandNofile()
	syscall.ForkLock.Lock()
	pid, errno := forkChild(argv0, &argvp[0], &envp[0], &fds, nproc, nofile, os.Getpid(), pipe[1])
	syscall.ForkLock.Unlock()
	unix.Close(pipe[1])
	if errno != 0 {
		return 0, errno
	}
	return pid, childExecError(pid, pipe[0])
}

// selectSoftNofile is the soft descriptor limit a command is given back
// when the runtime raised ours: the kernel's default, and the most
// descriptors select(2) can watch (FD_SETSIZE).
const selectSoftNofile = 1024

// commandNofile is the RLIMIT_NOFILE a command runs under, nil to keep
// this process's. At its start the Go runtime raised this process's soft
// limit to its hard limit less one, which package syscall gives back to
// what it starts, but a fork of our own does not, and the original is
// not to be had: a command would run with hundreds of thousands, and a
// program that sizes an fd_set by it, or closes every descriptor up to
// it, breaks or crawls. The command then gets selectSoftNofile (as the
// run's program gets the limit the server started with: 1024 unless an
// administrator raised it), never above the hard limit.
func commandNofile() *unix.Rlimit {
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) != nil || lim.Max < 1 || lim.Cur != lim.Max-1 {
		return nil // not the runtime's raise
	}
	return &unix.Rlimit{Cur: min(selectSoftNofile, lim.Max), Max: lim.Max}
}

// childExecError waits for the child's exec: the pipe ends (close on
// exec) when it succeeded, else it carries the errno, and the child is
// reaped.
func childExecError(pid, pipe int) error {
	var buf [4]byte
	for {
		n, err := unix.Read(pipe, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return nil
		}
		for {
			_, err := unix.Wait4(pid, nil, 0, nil)
			if err != unix.EINTR {
				break
			}
		}
		return syscall.Errno(*(*uint32)(unsafe.Pointer(&buf[0])))
	}
}

// forkChild forks; the child sets itself up and execs, or writes its
// errno on pipe and exits. It is a plain fork (the child has a copy of
// the memory, not the parent's), and between runtimeBeforeFork and the
// exec or runtimeAfterFork only system calls are made: no allocation, no
// call that could grow the stack.
//
//go:norace
func forkChild(argv0 *byte, argv, envv **byte, fds *[3]int, nproc uint64, nofile *unix.Rlimit, ppid, pipe int) (pid int, errno syscall.Errno) {
	lim := unix.Rlimit{Cur: nproc, Max: nproc}
	var failed uint32
	runtimeBeforeFork()
	r, _, e := syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if e != 0 || r != 0 {
		runtimeAfterFork()
		return int(r), e
	}
	// The child.
	runtimeAfterForkInChild()
	if _, _, e = syscall.RawSyscall6(syscall.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0, 0); e != 0 {
		goto fail
	}
	if r, _, _ = syscall.RawSyscall(syscall.SYS_GETPPID, 0, 0, 0); int(r) != ppid {
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, childFailed, 0, 0) // the parent died already
	}
	for i := 0; i < 3; i++ {
		if _, _, e = syscall.RawSyscall(syscall.SYS_DUP3, uintptr(fds[i]), uintptr(i), 0); e != 0 {
			goto fail
		}
	}
	if _, _, e = syscall.RawSyscall6(syscall.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0, 0); e != 0 {
		goto fail
	}
	if nofile != nil {
		if _, _, e = syscall.RawSyscall6(syscall.SYS_PRLIMIT64, 0, unix.RLIMIT_NOFILE, uintptr(unsafe.Pointer(nofile)), 0, 0, 0); e != 0 {
			goto fail
		}
	}
	if nproc > 0 {
		if _, _, e = syscall.RawSyscall6(syscall.SYS_PRLIMIT64, 0, unix.RLIMIT_NPROC, uintptr(unsafe.Pointer(&lim)), 0, 0, 0); e != 0 {
			goto fail
		}
	}
	_, _, e = syscall.RawSyscall(syscall.SYS_EXECVE, uintptr(unsafe.Pointer(argv0)), uintptr(unsafe.Pointer(argv)), uintptr(unsafe.Pointer(envv)))
fail:
	failed = uint32(e)
	syscall.RawSyscall(syscall.SYS_WRITE, uintptr(pipe), uintptr(unsafe.Pointer(&failed)), 4)
	for {
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, childFailed, 0, 0)
	}
}
