package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/cli"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/agent/tools"
	"github.com/ctxfs/ctxfs/agent/trampoline"
)

// ToolCommand is the hidden command of the ctxfs binary that carries out
// a run's built-in tool calls: `ctxfs __tool` (tools.Main).
const ToolCommand = tools.Command

const (
	// toolDeadline bounds a call besides shell.exec's own timeout: a tool
	// process stuck on a hung filesystem is stopped, its call an error.
	toolDeadline = 60 * time.Second
	// toolNprocHeadroom is how many more tasks (processes and threads)
	// than the uid has when shell.exec starts the command may make: a
	// fork bomb stops there (RLIMIT_NPROC), and the uid's own work
	// elsewhere is not starved by the bound.
	toolNprocHeadroom = 256
	// maxToolResult bounds a result sent to the model: a shell.exec's two
	// streams of 64 KiB, each byte escaped at worst, fit many times over.
	maxToolResult = 2 << 20
	// toolEndGrace is how long an ended tool process has to exit by
	// itself before it is killed.
	toolEndGrace = time.Second
)

// ExecTool carries out one built-in tool call of a model run (SPEC 17)
// and returns its result as JSON text for the model; isError marks a
// call that failed (bad arguments, an errno, a change keep refused). It
// starts a tool process for this call alone; a run makes its calls
// through one toolSession, which keeps its process between calls.
func ExecTool(ctx context.Context, s Spec, call ToolCall, keep func(FileBefore) error) (content string, isError bool) {
	ts := newToolSession(s)
	defer ts.close()
	return ts.exec(ctx, call, keep)
}

// toolIdle is how long a run's tool process waits for the next call
// (while the model thinks, or a person decides) before it is ended; the
// next call then starts a new one. (A variable for the tests.)
var toolIdle = 30 * time.Second

// toolSession carries out the built-in tool calls of one run, one at a
// time, in one tool process (`ctxfs __tool`) started at the run's first
// call and kept until the run ends (close) or the process was idle for
// toolIdle: each call is then a round trip on its pipes, and shell.exec
// one fork and exec in it.
//
// The process runs as s.Uid and s.Gid, never as root, the way the run's
// program would be: through the jail trampoline with isolation chroot (so
// the kernel resolves every path inside the jail: a symlink to
// /etc/shadow reads the jail's file or nothing), else through the enter
// trampoline in s.Dir with the uid's own permissions. A change (fs.write,
// fs.replace, fs.remove) is made in two steps: the process reports the
// file as it is, the session hands that to keep, and only when keep
// returns nil does the process change it; an error from keep is the
// call's result, and nothing changed.
//
// The process is the uid's own (outside a jail the uid may tamper with
// it), so nothing it says is trusted beyond what one call could say: each
// reply is bounded and checked as it arrives. A call that does not end
// well (the process died, said something no tool process says, or the
// call was cancelled or ran out of time) ends the process with it: the
// next call starts a new one. ctx ends a call: the process group gets
// SIGTERM (the tool process kills what shell.exec started), then SIGKILL
// after a grace. Outside a jail a call for uid 0 is refused (EPERM): it
// would run as root.
type toolSession struct {
	s     Spec
	mu    sync.Mutex   // one call at a time; guards p and idle
	p     *toolProcess // the live process, nil before the first call and after it ended
	calls uint64       // calls made, so that an idle timer that fired late ends nothing
	idle  *time.Timer  // ends p once it has served no call for toolIdle
}

func newToolSession(s Spec) *toolSession { return &toolSession{s: s} }

// exec carries out one call; see toolSession.
func (ts *toolSession) exec(ctx context.Context, call ToolCall, keep func(FileBefore) error) (content string, isError bool) {
	s := ts.s
	args, err := tools.Parse(call.Name, call.Arguments)
	switch {
	case s.Def == nil:
		err = abi.Errorf(syscall.EINVAL, call.Name, "no definition")
	case err != nil:
	case call.Name == tools.AskUser:
		err = abi.Errorf(syscall.EINVAL, call.Name, "ask_user is answered by a person, not run")
	case keep == nil && tools.Class(call.Name) == tools.ClassWrite:
		err = abi.Errorf(syscall.ENOTSUP, call.Name, "nothing keeps the earlier content of a file here, so none is changed")
	case s.Uid == 0 && s.Def.Isolation != def.IsolationChroot:
		// In a jail uid 0 holds no capability; outside one it is root.
		err = abi.Errorf(syscall.EPERM, call.Name, "a built-in tool never runs as root outside a chroot jail")
	}
	if err != nil {
		return toolFailure(err)
	}
	// A restore's paths are versions', kept with no symlink in them: none
	// is followed now (tools.Request.Exact).
	req := tools.Request{Name: call.Name, Args: args, Exact: s.Def.Restore != nil}
	deadline := toolDeadline
	if call.Name == tools.ShellExec {
		req.Nproc = uint64(uidTasks(s.Uid)) + toolNprocHeadroom
		deadline += time.Duration(args.Timeout) * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	reply, err := ts.run(ctx, &req, keep)
	switch {
	case err != nil:
		return toolFailure(err)
	case reply.Error != nil:
		return toolFailure(reply.Error.Err())
	}
	return string(reply.Result), false
}

// run makes the call in the session's process, started first when there
// is none (or the last one has ended), and ends the process when the call
// did not end well.
func (ts *toolSession) run(ctx context.Context, req *tools.Request, keep func(FileBefore) error) (*tools.Reply, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ctx.Err() != nil {
		return nil, abi.Errorf(syscall.ECANCELED, req.Name, "the run was stopped")
	}
	if ts.idle != nil {
		ts.idle.Stop()
	}
	if ts.p != nil && ts.p.ended() { // it died between calls (killed, or a crash)
		ts.p.end()
		ts.p = nil
	}
	if ts.p == nil {
		p, err := startTool(ts.s)
		if err != nil {
			return nil, err
		}
		ts.p = p
	}
	p := ts.p
	replied := make(chan struct{})
	terminated := make(chan bool, 1) // whether ctx ended the process before its reply
	go func() {
		select {
		case <-ctx.Done():
			(&program{pgid: p.cmd.Process.Pid}).terminate(make(chan struct{}))
			terminated <- true
		case <-replied:
			terminated <- false
		}
	}()
	reply, err := p.converse(req, keep)
	close(replied)
	ts.calls++
	if !<-terminated && err == nil {
		calls := ts.calls
		ts.idle = time.AfterFunc(toolIdle, func() { ts.endIdle(calls) })
		return reply, nil
	}
	ts.p = nil
	waitErr, setupErr := p.end()
	if setupErr != nil {
		err = setupErr
	}
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		return nil, abi.Errorf(syscall.ETIMEDOUT, req.Name, "the call did not end in time")
	case ctx.Err() != nil:
		return nil, abi.Errorf(syscall.ECANCELED, req.Name, "the call was stopped with its run")
	case waitErr != nil:
		return nil, abi.Errorf(abi.Errno(err), req.Name, "the tool process failed (%v): %v %s", waitErr, abi.Message(err), strings.TrimSpace(string(p.stderr.bytes())))
	}
	return nil, err
}

// close ends the session's process, if it has one: at the run's end, or
// once it has been idle for toolIdle. A later call starts a new one.
func (ts *toolSession) close() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.idle != nil {
		ts.idle.Stop()
	}
	if ts.p != nil {
		ts.p.end()
		ts.p = nil
	}
}

// endIdle ends the process when no call was made since the calls-th.
func (ts *toolSession) endIdle(calls uint64) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.calls == calls && ts.p != nil {
		ts.p.end()
		ts.p = nil
	}
}

// toolFailure is err as the JSON text a model reads: its errno's name and
// its words.
func toolFailure(err error) (string, bool) {
	msg := err.Error()
	if e, ok := err.(*abi.Error); ok {
		msg = e.Msg
	}
	b, _ := json.Marshal(tools.Failure{Code: abi.ErrnoName(abi.Errno(err)), Message: msg})
	return string(b), true
}

// toolProcess is one started tool process.
type toolProcess struct {
	cmd               *exec.Cmd
	in                *os.File      // its stdin: the requests, and the answers to Befores
	out               *bufio.Reader // its stdout: the replies
	setup             *os.File      // the trampoline's setup pipe, nil without one
	stderr            tail          // the last of what it wrote on stderr: a crash's words
	exited            chan struct{} // closed once it is reaped, what was left in its group killed, and waitErr and setupErr set
	waitErr, setupErr error
}

// reap waits for the process, kills whatever it left in its group, and
// reads why its trampoline failed, if it did.
func (p *toolProcess) reap() {
	p.waitErr = p.cmd.Wait()
	unix.Kill(-p.cmd.Process.Pid, unix.SIGKILL)
	dropGroup(p.cmd.Process.Pid)
	if p.setup != nil {
		p.setupErr = trampoline.ReadSetup(p.setup)
		p.setup.Close()
	}
	close(p.exited)
}

// ended reports whether the process is gone.
func (p *toolProcess) ended() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// end ends the process: its stdin closes, which ends a tool process
// between calls at once; one that is not gone after toolEndGrace, and
// everything in its group, is killed. It returns once the process is
// reaped, with how it ended.
func (p *toolProcess) end() (waitErr, setupErr error) {
	p.in.Close()
	select {
	case <-p.exited:
	case <-time.After(toolEndGrace):
		unix.Kill(-p.cmd.Process.Pid, unix.SIGKILL)
		<-p.exited
	}
	return p.waitErr, p.setupErr
}

// converse sends req and reads replies: a Before goes to keep, and its
// answer back; the final reply is returned. Any reply that is not what a
// tool process of ours sends is an error (the caller then ends the
// process: what it says next is not to be read as an answer). A refusal
// by keep is the call's error once the final reply came.
func (p *toolProcess) converse(req *tools.Request, keep func(FileBefore) error) (*tools.Reply, error) {
	if err := tools.WriteLine(p.in, req); err != nil {
		return nil, abi.Errorf(syscall.EIO, req.Name, "sending the call: %v", err)
	}
	var kerr error
	kept := false
	for {
		var r tools.Reply
		if err := tools.ReadLine(p.out, &r); err != nil {
			if err == io.EOF {
				return nil, abi.Errorf(syscall.EIO, req.Name, "the tool process ended without a result")
			}
			return nil, err
		}
		if r.Before == nil {
			if kerr != nil {
				return &tools.Reply{Error: toolError(kerr)}, nil
			}
			if r.Error == nil && (len(r.Result) == 0 || len(r.Result) > maxToolResult || !json.Valid(r.Result)) {
				return nil, abi.Errorf(syscall.EPROTO, req.Name, "the tool process gave no result, or one over %d bytes", maxToolResult)
			}
			return &r, nil
		}
		if kept || tools.Class(req.Name) != tools.ClassWrite {
			return nil, abi.Errorf(syscall.EPROTO, req.Name, "the tool process asked to keep a file twice, or for a call that changes none")
		}
		kept = true
		if err := checkBefore(r.Before); err != nil {
			return nil, abi.Errorf(syscall.EPROTO, req.Name, "%s", abi.Message(err))
		}
		kerr = keep(FileBefore{Path: r.Before.Path, Existed: r.Before.Existed, Content: r.Before.Content})
		if err := tools.WriteLine(p.in, tools.Go{Go: kerr == nil}); err != nil {
			return nil, abi.Errorf(syscall.EIO, req.Name, "answering the tool process: %v", err)
		}
	}
}

// toolError is err as a reply's Failure.
func toolError(err error) *tools.Failure {
	return &tools.Failure{Code: abi.ErrnoName(abi.Errno(err)), Message: abi.Message(err)}
}

// checkBefore refuses a Before no tool process of ours would send: the
// process runs as the uid, and another process of that uid could make it
// say anything (ptrace), so what reaches keep is bounded here.
func checkBefore(b *tools.Before) error {
	switch {
	case len(b.Content) > tools.MaxBefore || !b.Existed && len(b.Content) > 0:
		return fmt.Errorf("a file's earlier content over %d bytes, or for a file that was not there", tools.MaxBefore)
	case !path.IsAbs(b.Path) || path.Clean(b.Path) != b.Path || len(b.Path) > tools.MaxPath || strings.IndexByte(b.Path, 0) >= 0:
		return fmt.Errorf("a kept file's path %q is not absolute and clean", b.Path)
	}
	return nil
}

// startTool starts `ctxfs __tool` as the run's program would be started
// (launcher): the same uid, working directory, environment and jail, with
// the server's own binary in the place of the program. That binary is
// static (CGO_ENABLED=0), so a jail's root/ needs nothing for it. If the
// server dies, the process's stdin ends, and a running shell.exec is
// killed with all it started (tools.Main); a jailed one also dies with
// its jail's init (Pdeathsig).
func startTool(s Spec) (*toolProcess, error) {
	if Enter == "" {
		return nil, abi.Errorf(syscall.ENOTSUP, "tool", "built-in tools need the ctxfs server's binary (agent.Enter)")
	}
	defn := *s.Def
	defn.Program, defn.CLI = Enter, nil
	ts := s
	ts.Def, ts.Input = &defn, ""
	ts.CLI = &CLIRun{Invocation: cli.Invocation{Args: []string{ToolCommand}}} // only its Args: the program's arguments
	in, out, err := twoPipes("tool")
	if err != nil {
		return nil, err
	}
	inR, inW, outR, outW := in[0], in[1], out[0], out[1]
	p := &toolProcess{}
	cmd := &exec.Cmd{Stdin: inR, Stdout: outW, Stderr: &p.stderr, WaitDelay: drainGrace}
	setup, err := startVia(ts, cmd, []*os.File{inR, outW}, []*os.File{inW, outR})
	if err != nil {
		return nil, abi.Errorf(abi.Errno(err), "tool", "starting the tool process: %v", abi.Message(err))
	}
	p.cmd, p.in, p.out, p.setup = cmd, inW, bufio.NewReaderSize(outR, 64<<10), setup
	holdGroup(cmd.Process.Pid)
	p.exited = make(chan struct{})
	go p.reap()
	return p, nil
}

// uidTasks counts the tasks (threads) of processes owned by uid, as the
// server sees them: what RLIMIT_NPROC counts. A process that ends meanwhile
// is just not counted.
func uidTasks(uid uint32) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Stat("/proc/"+e.Name(), &st) != nil || st.Uid != uid {
			continue
		}
		n += threadsOf(e.Name())
	}
	return n
}

// threadsOf is field 20 (num_threads) of /proc/PID/stat, 1 if unreadable.
func threadsOf(pid string) int {
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if i := strings.LastIndexByte(string(stat), ')'); err == nil && i > 0 {
		if f := strings.Fields(string(stat[i+1:])); len(f) > 17 {
			if n, err := strconv.Atoi(f[17]); err == nil {
				return n
			}
		}
	}
	return 1
}
