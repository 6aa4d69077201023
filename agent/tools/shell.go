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
// up to MaxOutput each, under RLIMIT_NPROC at nproc and no_new_privs
// (forkExec). It ends at the call's timeout or when ctx ends; then, and
// also when the command ends by itself, every process it left is killed
// and reaped: the tool process is a child subreaper (Main), so all of
// them, even one that left the process group or the session, are its
// descendants (killDescendants). No process of the call outlives it.
func shell(ctx context.Context, a *Args, nproc uint64) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(a.Timeout)*time.Second)
	defer cancel()
	prog, err := lookPath(a.Argv[0])
	if err != nil {
		return nil, err
	}
	stdout, stderr, err := newReaders()
	if err != nil {
		return nil, err
	}
	pid, err := forkExec(prog, a.Argv, os.Environ(), stdout.w, stderr.w, nproc)
	stdout.w.Close() // the command holds its own copies: the readers see EOF once it and its descendants are gone
	stderr.w.Close()
	if err != nil {
		stdout.finish()
		stderr.finish()
		return nil, abi.Errorf(abi.Errno(err), ShellExec, "cannot run %s: %v", a.Argv[0], errnoText(err))
	}
	ws := waitCommand(ctx, pid)
	killDescendants()
	res := shellResult{Stdout: stdout.finish(), Stderr: stderr.finish(), Truncated: stdout.cut || stderr.cut}
	res.TimedOut = errors.Is(ctx.Err(), context.DeadlineExceeded)
	exitStatus(ws, &res)
	return res, nil
}

// lookPath finds the program in PATH, so that one that cannot be found is
// ENOENT for the model.
func lookPath(name string) (string, error) {
	prog, err := exec.LookPath(name)
	if errors.Is(err, exec.ErrNotFound) {
		return "", abi.Errorf(syscall.ENOENT, ShellExec, "%s is not found in PATH", name)
	}
	if err != nil {
		return "", abi.Errorf(abi.Errno(err), ShellExec, "cannot run %s: %v", name, errnoText(err))
	}
	return prog, nil
}

// waitCommand reaps the command, killing it first when ctx ends: it is
// not reaped yet then, so its pid is still its own; what it started is
// killDescendants' to find.
func waitCommand(ctx context.Context, pid int) unix.WaitStatus {
	exited := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			unix.Kill(pid, unix.SIGKILL)
		case <-exited:
		}
	}()
	defer close(exited)
	for {
		var ws unix.WaitStatus
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if err != unix.EINTR {
			return ws
		}
	}
}

// exitStatus fills in how the command ended: its status, or 128+N and
// the signal's name for a death by signal N, as a shell says it.
func exitStatus(ws unix.WaitStatus, res *shellResult) {
	switch {
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
