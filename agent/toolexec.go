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
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/cli"
	"github.com/ctxfs/ctxfs/agent/tools"
)

// ToolCommand is the hidden command of the ctxfs binary that carries out
// one built-in tool call: `ctxfs __tool` (tools.Main).
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
)

// ExecTool carries out one built-in tool call of a model run (SPEC 17)
// and returns its result as JSON text for the model; isError marks a
// call that failed (bad arguments, an errno, a change keep refused).
//
// The call runs in a tool process (`ctxfs __tool`) started as s.Uid and
// s.Gid, never as root, the way the run's program would be: through the
// jail trampoline with isolation chroot (so the kernel resolves every
// path inside the jail: a symlink to /etc/shadow reads the jail's file
// or nothing), else through the enter trampoline in s.Dir with the uid's
// own permissions. A change (fs.write, fs.replace, fs.remove) is made in
// two steps: the process reports the file as it is, ExecTool hands that
// to keep, and only when keep returns nil does the process change it; an
// error from keep is the call's result, and nothing changed.
//
// Outside a jail a call for uid 0 is refused (EPERM): it would run as
// root. ctx ends the call: the process group gets SIGTERM (the tool process
// kills what shell.exec started), then SIGKILL after a grace.
func ExecTool(ctx context.Context, s Spec, call ToolCall, keep func(FileBefore) error) (content string, isError bool) {
	args, err := tools.Parse(call.Name, call.Arguments)
	switch {
	case s.Def == nil:
		err = abi.Errorf(syscall.EINVAL, call.Name, "no definition")
	case err != nil:
	case call.Name == tools.AskUser:
		err = abi.Errorf(syscall.EINVAL, call.Name, "ask_user is answered by a person, not run")
	case keep == nil && tools.Class(call.Name) == tools.ClassWrite:
		err = abi.Errorf(syscall.ENOTSUP, call.Name, "nothing keeps the earlier content of a file here, so none is changed")
	case s.Uid == 0 && s.Def.Isolation != IsolationChroot:
		// In a jail uid 0 holds no capability; outside one it is root.
		err = abi.Errorf(syscall.EPERM, call.Name, "a built-in tool never runs as root outside a chroot jail")
	}
	if err != nil {
		return toolFailure(err)
	}
	req := tools.Request{Name: call.Name, Args: args}
	deadline := toolDeadline
	if call.Name == tools.ShellExec {
		req.Nproc = uint64(uidTasks(s.Uid)) + toolNprocHeadroom
		deadline += time.Duration(args.Timeout) * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	reply, err := runTool(ctx, s, &req, keep)
	switch {
	case err != nil:
		return toolFailure(err)
	case reply.Error != nil:
		return toolFailure(reply.Error.Err())
	case len(reply.Result) == 0 || len(reply.Result) > maxToolResult || !json.Valid(reply.Result):
		return toolFailure(abi.Errorf(syscall.EPROTO, call.Name, "the tool process gave no result, or one over %d bytes", maxToolResult))
	}
	return string(reply.Result), false
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
	cmd    *exec.Cmd
	in     *os.File      // its stdin: the request, then the answer to a Before
	out    *bufio.Reader // its stdout: the replies
	setup  *os.File      // the trampoline's setup pipe, nil without one
	stderr tail          // the last of what it wrote on stderr: a crash's words
}

// runTool starts the tool process, speaks the protocol, and returns the
// final reply once the process is reaped. A process that ends without a
// reply reports why its trampoline failed, if it did.
func runTool(ctx context.Context, s Spec, req *tools.Request, keep func(FileBefore) error) (*tools.Reply, error) {
	if ctx.Err() != nil {
		return nil, abi.Errorf(syscall.ECANCELED, req.Name, "the run was stopped")
	}
	p, err := startTool(s)
	if err != nil {
		return nil, err
	}
	stopped := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			done := make(chan struct{})
			(&program{pgid: p.cmd.Process.Pid}).terminate(done)
		case <-stopped:
		}
	}()
	reply, err := p.converse(req, keep)
	p.in.Close()
	waitErr := p.cmd.Wait()
	close(stopped)
	unix.Kill(-p.cmd.Process.Pid, unix.SIGKILL) // whatever the call left in its group
	if p.setup != nil {
		if serr := readSetup(p.setup); serr != nil && err != nil {
			err = serr
		}
		p.setup.Close()
	}
	switch {
	case ctx.Err() == context.DeadlineExceeded && err != nil:
		return nil, abi.Errorf(syscall.ETIMEDOUT, req.Name, "the call did not end in time")
	case ctx.Err() != nil && err != nil:
		return nil, abi.Errorf(syscall.ECANCELED, req.Name, "the call was stopped with its run")
	case err != nil && waitErr != nil:
		return nil, abi.Errorf(abi.Errno(err), req.Name, "the tool process failed (%v): %v %s", waitErr, errMsg(err), strings.TrimSpace(string(p.stderr.bytes())))
	}
	return reply, err
}

// converse sends req and reads replies: a Before goes to keep, and its
// answer back; the final reply is returned.
func (p *toolProcess) converse(req *tools.Request, keep func(FileBefore) error) (*tools.Reply, error) {
	if err := tools.WriteLine(p.in, req); err != nil {
		return nil, abi.Errorf(syscall.EIO, req.Name, "sending the call: %v", err)
	}
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
			return &r, nil
		}
		if kept || tools.Class(req.Name) != tools.ClassWrite {
			return nil, abi.Errorf(syscall.EPROTO, req.Name, "the tool process asked to keep a file twice, or for a call that changes none")
		}
		kept = true
		if err := checkBefore(r.Before); err != nil {
			return nil, abi.Errorf(syscall.EPROTO, req.Name, "%s", errMsg(err))
		}
		kerr := keep(FileBefore{Path: r.Before.Path, Existed: r.Before.Existed, Content: r.Before.Content})
		if err := tools.WriteLine(p.in, tools.Go{Go: kerr == nil}); err != nil && kerr == nil {
			return nil, abi.Errorf(syscall.EIO, req.Name, "answering the tool process: %v", err)
		}
		if kerr != nil {
			return nil, kerr
		}
	}
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
	def := *s.Def
	def.Program, def.CLI = Enter, nil
	ts := s
	ts.Def, ts.Input = &def, ""
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
		return nil, abi.Errorf(abi.Errno(err), "tool", "starting the tool process: %v", errMsg(err))
	}
	p.cmd, p.in, p.out, p.setup = cmd, inW, bufio.NewReaderSize(outR, 64<<10), setup
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
