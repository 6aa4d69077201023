package tools

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
)

// drainGrace is how long shell.exec keeps reading output once every
// process it started is gone (a pipe then ends at once) or could not be
// reaped (it then gives up on the pipe).
const drainGrace = 2 * time.Second

type shellResult struct {
	ExitStatus int    `json:"exit_status"`
	Signal     string `json:"signal,omitempty"`
	TimedOut   bool   `json:"timed_out,omitempty"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	Truncated  bool   `json:"truncated"`
}

// shell runs a.Argv in the working directory with the process's
// environment (the run's), stdin from /dev/null, stdout and stderr kept
// up to MaxOutput each. It ends at the call's timeout or when ctx ends;
// then, and also when the command ends by itself, every process it left
// is killed and reaped: the tool process is a child subreaper, so all of
// them, even one that left the process group or the session, are its
// descendants (killDescendants). No process of the call outlives it.
//
// The command runs with no_new_privs (nothing it runs gains a privilege:
// a set-user-id program cannot put a process out of reach of the kill)
// and RLIMIT_NPROC at nproc, so that a fork bomb stops at a bound.
func shell(ctx context.Context, a *Args, nproc uint64) (any, error) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, abi.Errorf(abi.Errno(err), ShellExec, "PR_SET_CHILD_SUBREAPER: %v", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return nil, abi.Errorf(abi.Errno(err), ShellExec, "PR_SET_NO_NEW_PRIVS: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(a.Timeout)*time.Second)
	defer cancel()
	stdout, stderr, err := newReaders()
	if err != nil {
		return nil, err
	}
	cmd, err := startCommand(a.Argv, stdout.w, stderr.w, nproc)
	stdout.w.Close() // the command holds its own copies: the readers see EOF once it and its descendants are gone
	stderr.w.Close()
	if err != nil {
		stdout.r.Close()
		stderr.r.Close()
		return nil, err
	}
	exited := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			// The command is not reaped yet, so its pid is still its
			// own; what it started is killDescendants' to find.
			unix.Kill(cmd.Process.Pid, unix.SIGKILL)
		case <-exited:
		}
	}()
	cmd.Wait()
	close(exited)
	killDescendants()
	res := shellResult{Stdout: stdout.finish(), Stderr: stderr.finish(), Truncated: stdout.cut || stderr.cut}
	res.TimedOut = errors.Is(ctx.Err(), context.DeadlineExceeded)
	exitStatus(cmd, &res)
	return res, nil
}

// execMode is the tool process's second form, `ctxfs __tool exec NPROC
// PATH ARGV...`: what shell.exec starts in the command's place. It sets
// RLIMIT_NPROC to NPROC and execs PATH with ARGV and its environment. So
// the bound holds for the command and all it starts, from its first
// instruction, and never for the tool process itself, whose runtime must
// still be able to start a thread while a fork bomb fills the uid's
// count.
const execMode = "exec"

// execLimited is execMode; it returns only on failure, as a shell's 127.
func execLimited(args []string) int {
	if len(args) < 3 {
		return 127
	}
	n, err := strconv.ParseUint(args[0], 10, 64)
	if err != nil {
		return 127
	}
	if n > 0 {
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: n, Max: n}); err != nil {
			os.Stderr.WriteString("ctxfs: RLIMIT_NPROC: " + err.Error() + "\n")
			return 127
		}
	}
	err = unix.Exec(args[1], args[2:], os.Environ())
	os.Stderr.WriteString("ctxfs: cannot execute " + args[1] + ": " + err.Error() + "\n")
	return 127
}

// startCommand starts argv through execMode, in this process's group (so
// that the server's kill of the group reaches it whatever becomes of this
// process) and killed if this process dies. The program is looked up
// here, so that one that cannot be found is ENOENT for the model.
func startCommand(argv []string, stdout, stderr *os.File, nproc uint64) (*exec.Cmd, error) {
	prog, err := exec.LookPath(argv[0])
	if errors.Is(err, exec.ErrNotFound) {
		return nil, abi.Errorf(syscall.ENOENT, ShellExec, "%s is not found in PATH", argv[0])
	}
	if err != nil {
		return nil, abi.Errorf(abi.Errno(err), ShellExec, "cannot run %s: %v", argv[0], errnoText(err))
	}
	self, err := os.Executable()
	if err != nil {
		return nil, abi.Errorf(abi.Errno(err), ShellExec, "finding the tool binary: %v", err)
	}
	cmd := exec.Command(self, append([]string{Command, execMode, strconv.FormatUint(nproc, 10), prog}, argv...)...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, abi.Errorf(abi.Errno(err), ShellExec, "cannot run %s: %v", argv[0], errnoText(err))
	}
	return cmd, nil
}

// exitStatus fills in how the command ended: its status, or 128+N and
// the signal's name for a death by signal N, as a shell says it.
func exitStatus(cmd *exec.Cmd, res *shellResult) {
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case !ok:
		res.ExitStatus = 127
	case ws.Signaled():
		res.ExitStatus, res.Signal = 128+int(ws.Signal()), unix.SignalName(ws.Signal())
	default:
		res.ExitStatus = ws.ExitStatus()
	}
}

// killDescendants kills and reaps every child of this process until none
// is left. Orphans of the command become this subreaper's children as
// their parents die, so each round reaches the next generation; a process
// that has a SIGKILL pending can no longer fork, so the rounds end. A
// child's pid cannot be reused before this process reaps it, so killing
// by pid reaches no other process.
func killDescendants() {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if !reapChildren() {
			return // none left: the common case costs no look at /proc
		}
		kids := children()
		for _, pid := range kids {
			unix.Kill(pid, unix.SIGKILL)
		}
		if len(kids) == 0 {
			time.Sleep(5 * time.Millisecond) // a child not yet in /proc, or being reparented
		}
	}
}

// reapChildren reaps the children that ended; false when none is left.
func reapChildren() bool {
	for {
		pid, err := unix.Wait4(-1, nil, unix.WNOHANG, nil)
		switch {
		case err == unix.ECHILD:
			return false
		case err == unix.EINTR:
			continue
		case pid <= 0 || err != nil:
			return true
		}
	}
}

// children lists this process's children from /proc (PID/stat's ppid):
// the kernel's own list (/proc/PID/task/TID/children) is not built in
// every kernel.
func children() []int {
	self := strconv.Itoa(os.Getpid())
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(stat, ')')
		if f := strings.Fields(string(stat[i+1:])); i > 0 && len(f) >= 2 && f[1] == self {
			out = append(out, pid)
		}
	}
	return out
}

// reader reads one output stream of the command into a capped buffer.
type reader struct {
	capped
	r, w *os.File
	done chan struct{}
}

func newReaders() (stdout, stderr *reader, err error) {
	if stdout, err = newReader(); err != nil {
		return nil, nil, err
	}
	if stderr, err = newReader(); err != nil {
		stdout.r.Close()
		stdout.w.Close()
		return nil, nil, err
	}
	return stdout, stderr, nil
}

func newReader() (*reader, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, abi.Errorf(abi.Errno(err), ShellExec, "pipe: %v", err)
	}
	rd := &reader{capped: capped{max: MaxOutput}, r: r, w: w, done: make(chan struct{})}
	go func() {
		io.Copy(&rd.capped, r)
		close(rd.done)
	}()
	return rd, nil
}

// finish waits for the stream's end: at once when every process that held
// it is gone, else for drainGrace (a process this call could not reap,
// which its jail's end takes).
func (rd *reader) finish() string {
	select {
	case <-rd.done:
	case <-time.After(drainGrace):
		rd.r.SetReadDeadline(time.Now())
		<-rd.done
	}
	rd.r.Close()
	return rd.buf.String()
}

// capped keeps the first max bytes written to it and counts the rest
// away, so that a command writing without end neither blocks on a full
// pipe nor fills the tool process's memory. (The buffer is a field, not
// embedded: an embedded bytes.Buffer's ReadFrom would let io.Copy bypass
// Write and its bound.)
type capped struct {
	buf bytes.Buffer
	max int
	cut bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room < len(p) {
		c.cut = true
		c.buf.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return c.buf.Write(p)
}
