package trampoline

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
)

// EnterCommand is the hidden command of the ctxfs binary that enters a
// run's working directory and then becomes the agent's program:
// `ctxfs __enter DIR PROGRAM [ARG...]`.
const EnterCommand = "__enter"

// EnterMain is `ctxfs __enter DIR PROGRAM [ARG...]`: chdir to DIR (as
// the run's uid, through the mount), then exec PROGRAM with the run's
// environment, read from envFD (this process itself starts with none).
// It returns only on failure, after reporting it on the setup pipe
// (setupFD); the run then fails with that errno and those words.
func EnterMain(args []string) int {
	CloseOnExec()
	if len(args) < 2 {
		return setupFailed(syscall.EINVAL, "usage: ctxfs %s DIR PROGRAM [ARG...]", EnterCommand)
	}
	dir, prog := args[0], args[1]
	env, err := readEnvFD()
	if err != nil {
		return setupFailed(errnoOf(err), "%v", err)
	}
	if err := syscall.Chdir(dir); err != nil {
		return setupFailed(errnoOf(err), "cannot enter the run's working directory %s: %v", dir, err)
	}
	if err := dieWithServer(); err != nil {
		return setupFailed(errnoOf(err), "%v", err)
	}
	err = syscall.Exec(prog, append([]string{prog}, args[2:]...), env)
	return setupFailed(errnoOf(err), "cannot execute %s: %v", prog, err)
}

// dieWithServer sets the parent-death signal again on the thread that is
// about to exec. The server set it when it started this process, but on
// this process's first thread: the signal is a thread's, and Go may exec
// from another, which would leave the program running after the server
// died (its run closed as interrupted, nothing reading what it does). A
// server that died already is ESRCH.
func dieWithServer() error {
	ppid := syscall.Getppid()
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("setting the parent-death signal: %v", err)
	}
	if ppid == 1 || syscall.Getppid() != ppid {
		return abi.Errorf(syscall.ESRCH, "run", "the server died before the program started")
	}
	return nil
}
