package agent

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

// Enter is the program that enters a run's working directory for it (the
// server's own binary), or "" to let the forked child enter it itself.
//
// Why: a run's working directory is under the mount, which this very
// process serves. Go starts a program with vfork: the forking thread and
// its P stay suspended until the child calls exec. A child that entered
// its directory before exec would wait on a FUSE lookup that needs a P of
// the server, and with two runs starting at once on two cores none is
// left: the server, its runs and every caller of the mount stop. So the
// child execs this binary at once, in "/", and the new process, which
// suspends no one, enters the directory and execs the program. (The
// session tests, which run no mount, leave it "".)
var Enter string

// EnterMain is `ctxfs __enter DIR PROGRAM [ARG...]`: chdir to DIR (as the run's
// uid, through the mount), then exec PROGRAM with the run's environment,
// read from envFD (this process itself starts with none). It returns only on failure, after reporting it on the setup pipe
// (setupFD); the run then fails with that errno and those words.
func EnterMain(args []string) int {
	closeOnExec()
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
