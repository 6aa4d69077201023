package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/agent/prompt"
	"github.com/ctxfs/ctxfs/agent/trampoline"
	"github.com/ctxfs/ctxfs/internal/memfile"
	"github.com/ctxfs/ctxfs/proto"
)

// Spec is everything one run needs; the caller has decided all of it.
type Spec struct {
	RunID, Session, Scope string
	Def                   *def.Definition
	Uid, Gid              uint32            // the program runs as these; the caller never passes root for another user
	Groups                []uint32          // its supplementary groups: a shared space's group its caller is in, else none
	Input                 string            // written to stdin, then EOF
	Dir                   string            // host working directory, already resolved
	Env                   map[string]string // CTX_* and PATH, filled by the caller
	Jail                  *Jail             // with isolation chroot: the jail, made ready by the caller
	Prompt                *prompt.Prompt    // for a model API: the system prompt, the conversation, the summary
	CLI                   *CLIRun           // for a CLI agent (Def.CLI): what the engine prepared
	Host                  ToolHost          // for a model API run with tools: approvals, questions, versions
	Resume                *Resume           // for a run resumed after its answer came: where it stood
	Early                 *Early            // for a model API run: its first request, sent already (AskEarly)

	control *control // the run's control socket, when it has one (runCLI)
}

const (
	// killGrace is how long a cancelled run's process group has between
	// SIGTERM and SIGKILL.
	killGrace = 2 * time.Second
	// drainGrace is how long Run keeps reading output after the program
	// exited: a process that left the group (setsid) and kept the pipes
	// open must not hold the run open forever.
	drainGrace = 2 * time.Second
)

// Run runs one agent turn and calls emit for each frame, in order, from the
// calling goroutine (a first request sent early, Spec.Early, emits its
// deltas from its own while Run waits for it). It returns true for success (exit 0, or echo) and false
// for failure. Cancelling ctx stops the run (SIGTERM to its process group,
// SIGKILL after killGrace); from then on emit is not called. A definition's
// timeout stops the run the same way and then emits an ETIMEDOUT error
// frame. Run returns once the program is reaped and its output closed.
//
// The echo definition is answered even when its isolation is chroot: it
// runs nothing, so there is nothing to isolate.
func Run(ctx context.Context, s Spec, emit func(*proto.Object)) (ok bool) {
	if ctx.Err() != nil {
		return false
	}
	d := s.Def
	switch {
	case d == nil:
		emit(proto.ErrorFrame(abi.Errorf(syscall.EINVAL, "run", "no definition")))
		return false
	case d.Restore != nil:
		return runRestore(ctx, s, emit)
	case d.CLI != nil:
		return runCLI(ctx, s, emit)
	case d.Echo():
		return runEcho(s, emit)
	case d.AnsweredByAPI():
		return runAPI(ctx, s, emit)
	case d.Program == "":
		emit(proto.ErrorFrame(abi.Errorf(syscall.ENOENT, "run", "%s %s has no program and its model %s is not %s", d.Kind, d.Name, d.Model, def.EchoModel)))
		return false
	}
	return runProgram(ctx, s, emit)
}

// runEcho answers with the input as the assistant message. Token counts
// are estimated as one token per 4 bytes, rounded up: the common rule of
// thumb, and unlike word counts it also works for text without spaces.
func runEcho(s Spec, emit func(*proto.Object)) bool {
	n := (len(s.Input) + 3) / 4
	emit(messageFrame(s.Input))
	emit(proto.NewObject("type", proto.FrameUsage, "model", def.EchoModel, "input_tokens", n, "output_tokens", n))
	return true
}

// messageFrame is an assistant message with one text part.
func messageFrame(text string) *proto.Object {
	part := proto.NewObject("type", "text", "text", text)
	return proto.NewObject("type", proto.FrameMessage, "role", "assistant", "content", []*proto.Object{part})
}

// runProgram starts the program, relays its frames and reports how it ended.
func runProgram(ctx context.Context, s Spec, emit func(*proto.Object)) bool {
	runCtx, cancel := ctx, context.CancelFunc(func() {})
	if s.Def.Timeout > 0 {
		runCtx, cancel = context.WithTimeout(ctx, s.Def.Timeout)
	}
	defer cancel()
	if s.control == nil && s.Host != nil {
		// Every program run gets its control socket (agent.create, SPEC
		// 18); a CLI's under approval ask has it already (askPermits).
		c, err := s.giveControl(ctx)
		if err != nil {
			emit(proto.ErrorFrame(err))
			return false
		}
		defer c.close()
	}
	p, err := startProgram(s)
	if err != nil {
		emit(proto.ErrorFrame(err))
		return false
	}
	defer dropGroup(p.pgid) // pump killed what was left in it
	s.control.started(p.pgid)
	waitErr, stopped := p.pump(runCtx, emit)
	switch {
	case !stopped && p.setupErr != nil: // reported as the run's error already
		return false
	case !stopped && s.CLI != nil:
		return s.CLI.finish(waitErr, p.stderrTail.bytes(), emit)
	case !stopped:
		return exitResult(waitErr, p.missingLib, emit)
	case ctx.Err() == nil: // stopped by the definition's timeout, not by the caller
		emit(proto.ErrorFrame(abi.Errorf(syscall.ETIMEDOUT, "run", "agent program did not finish within %s", s.Def.Timeout)))
	}
	return false
}

// exitResult turns the program's exit into the run's result; a failure is
// reported by an error frame carrying the exit code or the signal. Status
// 127 after the dynamic loader named a missing library is ENOENT naming it.
func exitResult(waitErr error, missingLib string, emit func(*proto.Object)) bool {
	if waitErr == nil {
		return true
	}
	var ee *exec.ExitError
	if !errors.As(waitErr, &ee) {
		emit(proto.ErrorFrame(abi.Errorf(syscall.EIO, "run", "waiting for the agent program: %v", waitErr)))
		return false
	}
	ws, _ := ee.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		f := proto.ErrorFrame(abi.Errorf(syscall.EIO, "run", "agent program killed by signal %s", unix.SignalName(ws.Signal())))
		f.Set("signal", unix.SignalName(ws.Signal()))
		emit(f)
		return false
	}
	f := proto.ErrorFrame(abi.Errorf(syscall.EIO, "run", "agent program exited with status %d", ws.ExitStatus()))
	if ws.ExitStatus() == 127 && missingLib != "" {
		f = proto.ErrorFrame(abi.Errorf(syscall.ENOENT, "run", "the shared library %s that the program needs is missing (in a chroot: from the agent's root/)", missingLib))
	}
	f.Set("exit_code", ws.ExitStatus())
	emit(f)
	return false
}

// program is one started agent program and the goroutines that read it.
type program struct {
	cmd            *exec.Cmd
	pgid           int
	stdout, stderr *os.File           // read ends of the output pipes
	setup          *os.File           // read end of the trampoline's setup pipe, nil without one
	setupErr       error              // what the trampoline reported, set before frames closes
	missingLib     string             // a library the dynamic loader said is missing, set before frames closes
	stderrTail     tail               // a CLI's last stderr bytes, for its parser's Finish
	frames         chan *proto.Object // from the readers, closed when both are done
	exited         chan error         // the result of cmd.Wait
}

// startProgram starts the program as s.Uid/s.Gid in its own process group,
// with exactly the environment it is owed, and starts its readers.
func startProgram(s Spec) (*program, error) {
	stdin, err := inputFile(s.Input)
	if err != nil {
		return nil, err
	}
	defer stdin.Close()
	out, errs, err := twoPipes("run")
	if err != nil {
		return nil, err
	}
	outR, outW, errR, errW := out[0], out[1], errs[0], errs[1]
	cmd := &exec.Cmd{Stdin: stdin, Stdout: outW, Stderr: errW}
	setup, err := startVia(s, cmd, []*os.File{outW, errW}, []*os.File{outR, errR})
	if err != nil {
		return nil, abi.Errorf(abi.Errno(err), "run", "starting %s: %v", s.Def.Program, err)
	}
	p := &program{cmd: cmd, pgid: cmd.Process.Pid, stdout: outR, stderr: errR, setup: setup,
		frames: make(chan *proto.Object, 64), exited: make(chan error, 1)}
	holdGroup(p.pgid)
	p.startReaders(s)
	go func() { p.exited <- cmd.Wait() }()
	return p, nil
}

// twoPipes makes two pipes, each {read end, write end}; on failure none
// is left open.
func twoPipes(op string) (a, b [2]*os.File, err error) {
	if a[0], a[1], err = os.Pipe(); err != nil {
		return a, b, abi.Wrap(op, err)
	}
	if b[0], b[1], err = os.Pipe(); err != nil {
		a[0].Close()
		a[1].Close()
		return a, b, abi.Wrap(op, err)
	}
	return a, b, nil
}

// startVia starts cmd as launcher says, and closes the child's ends of
// its pipes (childEnds, and what launcher handed it: the child holds its
// own copies, and keeping ours open would hide EOF); on failure it also
// closes ours (ownEnds) and the setup pipe. It returns the setup pipe's
// read end (nil without a trampoline).
func startVia(s Spec, cmd *exec.Cmd, childEnds, ownEnds []*os.File) (setup *os.File, err error) {
	setup, handed, err := launcher(s, cmd)
	if err == nil {
		err = cmd.Start()
	}
	for _, f := range append(childEnds, handed...) {
		f.Close()
	}
	if err != nil {
		for _, f := range ownEnds {
			f.Close()
		}
		if setup != nil {
			setup.Close()
		}
		return nil, err
	}
	return setup, nil
}

// launcher decides how cmd starts the program: directly (the session
// tests, which run no mount), through the enter trampoline, or through the
// jail trampoline (trampoline.Launch). The read end of a trampoline's
// setup pipe is returned, and handed lists what the caller closes once
// the child started.
func launcher(s Spec, cmd *exec.Cmd) (setup *os.File, handed []*os.File, err error) {
	jailed := s.Def.Isolation == def.IsolationChroot
	if jailed && s.Jail == nil {
		return nil, nil, abi.Errorf(syscall.ENOTSUP, "run", "chroot isolation needs the ctxfs server's mount")
	}
	if !jailed && Enter == "" {
		cmd.Path, cmd.Args, cmd.Dir, cmd.Env = s.Def.Program, append([]string{s.Def.Program}, s.programArgs()...), s.Dir, buildEnv(s)
		cmd.SysProcAttr, err = credentials(s.Uid, s.Gid, s.Groups)
		return nil, nil, err
	}
	var args []string
	var root *os.File
	if jailed {
		args, root, err = jailCommand(s)
		cmd.SysProcAttr = trampoline.JailAttr()
	} else {
		args = trampoline.EnterArgs(s.Dir, s.Def.Program, s.programArgs())
		cmd.SysProcAttr, err = credentials(s.Uid, s.Gid, s.Groups)
	}
	if err != nil {
		return nil, nil, err
	}
	return trampoline.Launch(cmd, Enter, args, buildEnv(s), root, s.control.jailed())
}

// credentials puts the program in its own process group (so that a cancel
// reaches everything it started) and, when the server is root, switches to
// uid/gid with groups as its only supplementary groups (Spec.Groups): the
// server's groups are not the user's. A server that is not root can only
// run programs as itself. The
// program dies with the server (Pdeathsig, set after the switch, kept
// across the exec of a program that gains nothing): its run is closed as
// interrupted at the next start, and nothing would read what it does.
func credentials(uid, gid uint32, groups []uint32) (*syscall.SysProcAttr, error) {
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if os.Geteuid() == 0 {
		attr.Credential = &syscall.Credential{Uid: uid, Gid: gid, Groups: append([]uint32{}, groups...)}
		return attr, nil
	}
	if int(uid) != os.Geteuid() || int(gid) != os.Getegid() {
		return nil, abi.Errorf(syscall.EPERM, "run", "a server running as uid %d cannot run a program as uid %d", os.Geteuid(), uid)
	}
	return attr, nil
}

// inputFile holds the input in a memory file positioned at its start: the
// program reads it and then EOF.
func inputFile(input string) (*os.File, error) { return memfile.New("ctxfs-input", input) }

// buildEnv is the caller's environment plus, for a CLI agent, what its
// invocation sets and its key, then the definition's env lines, nothing
// inherited. Definition lines may override PATH but never CTX_* nor the
// CLI's key.
func buildEnv(s Spec) []string {
	m := make(map[string]string, len(s.Env)+len(s.Def.Env))
	for k, v := range s.Env {
		m[k] = v
	}
	lim := s.Def.Limits() // SPEC 18: the window a program's own model calls should keep to
	m["CTX_CONTEXT_WINDOW_TOKENS"], m["CTX_CONTEXT_COMPACTION_TOKENS"] = strconv.Itoa(lim.Window), strconv.Itoa(lim.CompactAt)
	keyVar := s.CLI.addEnv(m)
	for _, line := range s.Def.Env {
		k, v, _ := strings.Cut(line, "=")
		if !strings.HasPrefix(k, "CTX_") && (keyVar == "" || k != keyVar) {
			m[k] = v
		}
	}
	env := make([]string, 0, len(m))
	for k, v := range m {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}

// pump relays frames until the readers are done and the program is
// reaped. stopped is true when ctx ended the run; from then on nothing is
// emitted and the process group is terminated.
func (p *program) pump(ctx context.Context, emit func(*proto.Object)) (waitErr error, stopped bool) {
	frames, exited, done := p.frames, p.exited, ctx.Done()
	var drain <-chan time.Time
	var terminated chan struct{}
	for frames != nil || exited != nil || terminated != nil {
		select {
		case f, ok := <-frames:
			switch {
			case !ok:
				frames = nil
			case ctx.Err() == nil: // a cancel racing with this frame wins
				emit(f)
			}
		case <-done:
			stopped, done = true, nil
			terminated = make(chan struct{})
			go p.terminate(terminated)
		case waitErr = <-exited:
			exited = nil
			if !stopped {
				// The run is over; anything it left in its group goes too.
				p.signalGroup(unix.SIGKILL)
			}
			drain = time.After(drainGrace)
		case <-drain:
			// Readers blocked on pipes held by an escaped process give up.
			p.stdout.SetReadDeadline(time.Now())
			p.stderr.SetReadDeadline(time.Now())
			drain = nil
		case <-terminated:
			terminated = nil
		}
	}
	p.stdout.Close()
	p.stderr.Close()
	return waitErr, stopped
}

// terminate sends SIGTERM to the process group and SIGKILL once killGrace
// has passed with any member left.
func (p *program) terminate(done chan struct{}) {
	defer close(done)
	p.signalGroup(unix.SIGTERM)
	deadline := time.Now().Add(killGrace)
	for time.Now().Before(deadline) {
		if !groupAlive(p.pgid) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.signalGroup(unix.SIGKILL)
}

// groupAlive reports whether any process of group pgid still runs. A
// zombie does not count: an orphan that the host's init has not reaped yet
// holds nothing, and waiting for it would delay every cancel.
func groupAlive(pgid int) bool {
	if unix.Kill(-pgid, 0) == unix.ESRCH {
		return false
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && runsInGroup(pid, pgid) {
			return true
		}
	}
	return false
}

// runsInGroup reports whether pid is a live member of group pgid.
func runsInGroup(pid, pgid int) bool {
	f := procStat(pid)
	return len(f) >= 3 && f[0] != "Z" && f[0] != "X" && f[2] == strconv.Itoa(pgid)
}

// procStat reads /proc/PID/stat, "pid (comm) state ppid pgrp ...", and
// returns its fields from state on (nil when it cannot): comm may hold
// spaces and parentheses, so they start after the last ')'.
func procStat(pid int) []string {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(stat[i+1:]))
}

// runGroups are the process groups of what runs for users now (agent
// programs, tool processes, compact.d programs), by pgid: a program's
// parent-death signal reaches the program alone, never what it started
// in its group, so a clean stop kills the groups (KillRunGroups). An
// entry is dropped once its leader is reaped (a program's and a tool
// process's group is killed then too).
var runGroups sync.Map

func holdGroup(pgid int) { runGroups.Store(pgid, struct{}{}) }
func dropGroup(pgid int) { runGroups.Delete(pgid) }

// KillRunGroups kills the process group of everything that runs for a
// user: the server's clean stop, once its logs are closed (the runs are
// closed as interrupted at the next start, as after a crash), so that no
// process a run started in its group outlives the server.
func KillRunGroups() {
	runGroups.Range(func(pgid, _ any) bool {
		_ = unix.Kill(-pgid.(int), unix.SIGKILL)
		return true
	})
}

// signalGroup signals every process in the run's group. The group id stays
// reserved while any member lives, so this never reaches another group.
func (p *program) signalGroup(sig unix.Signal) {
	_ = unix.Kill(-p.pgid, sig) // ESRCH: the group is already gone
}

// errorFrame is a frame that reports a problem found by the server.
func errorFrame(errno syscall.Errno, format string, args ...any) *proto.Object {
	return proto.NewObject("type", proto.FrameError, "code", abi.ErrnoName(errno), "message", fmt.Sprintf(format, args...))
}
