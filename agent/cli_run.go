package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/cli"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/agent/permitmcp"
	"github.com/ctxfs/ctxfs/agent/trampoline"
	"github.com/ctxfs/ctxfs/proto"
)

// CLIRun is what the engine prepared for a CLI agent's run: the
// invocation (its Files already written under the HOME it put in
// Spec.Env), the CLI session it resumes, and where a session id the CLI
// names goes.
type CLIRun struct {
	Resume     string
	Invocation cli.Invocation
	// Named is called at the run's end with the CLI's session id when the
	// CLI named one other than Resume, and either the run started a new
	// CLI session or ended ok: a resume that failed keeps the old id.
	Named func(id string)

	parser cli.Parser
	key    string // read at run time (runCLI), handed in Invocation.KeyVar
}

// runCLI runs a CLI agent: its key is read now, its stdout goes through
// its adapter's parser, and every frame is cleared of the key's value
// before it is emitted (the CLI might echo its environment).
func runCLI(ctx context.Context, s Spec, emit func(*proto.Object)) bool {
	if s.CLI == nil {
		emit(proto.ErrorFrame(abi.Errorf(syscall.EINVAL, "run", "cli agent %s was not prepared by the engine", s.Def.Name)))
		return false
	}
	if s.Def.Program == "" {
		emit(proto.ErrorFrame(abi.Errorf(syscall.ENOENT, "run", "cli agent %s has no program: agent/%s must be the %s executable or a script that execs it", s.Def.Name, s.Def.Name, s.Def.CLI.Adapter.Program())))
		return false
	}
	key, err := s.Def.CLI.Key()
	if err != nil {
		emit(proto.ErrorFrame(err))
		return false
	}
	run := *s.CLI
	run.key, run.parser = key, s.Def.CLI.Adapter.NewParser()
	s.CLI = &run
	if permitter, asks := s.Def.CLI.Adapter.(cli.Permitter); asks && s.Def.Approval == def.ApprovalAsk {
		c, err := s.askPermits(ctx, permitter)
		if err != nil {
			emit(proto.ErrorFrame(err))
			return false
		}
		defer c.close()
	}
	ok := runProgram(ctx, s, redactor(key, emit))
	if id := run.parser.SessionID(); id != "" && id != run.Resume && (run.Resume == "" || ok) && run.Named != nil {
		run.Named(id)
	}
	return ok
}

// askPermits readies a run whose CLI lets the host decide its permission
// prompts, under `approval ask` (SPEC 17): the run's control socket, its
// path in the environment (CTX_CONTROL_SOCKET), and the CLI told to ask
// `ctxfs __permit`, which asks that socket, for every prompt. The ctxfs
// binary is the server's own (Enter); a jailed run has both bound into
// its jail (JailMain). The caller closes the socket after the run.
func (s *Spec) askPermits(ctx context.Context, permitter cli.Permitter) (*control, error) {
	if Enter == "" {
		return nil, abi.Errorf(syscall.ENOTSUP, "run", "approval ask for a cli agent needs the ctxfs server")
	}
	c, err := s.giveControl(ctx)
	if err != nil {
		return nil, err
	}
	binary, socket := Enter, s.Env[trampoline.ControlSocketEnv]
	if s.Def.Isolation == def.IsolationChroot {
		binary = trampoline.JailCtxfs(s.Jail.MountRoot)
	}
	s.CLI.Invocation.Args = append(slices.Clone(s.CLI.Invocation.Args), permitter.PermitArgs(cli.Permit{
		Argv:    []string{binary, permitmcp.PermitCommand},
		Env:     map[string]string{trampoline.ControlSocketEnv: socket},
		Timeout: s.Def.ApprovalTimeout + time.Minute,
	})...)
	return c, nil
}

// programArgs are the program's arguments: a CLI's invocation, else none.
func (s Spec) programArgs() []string {
	if s.CLI == nil {
		return nil
	}
	return s.CLI.Invocation.Args
}

// addEnv adds the invocation's variables and the key to env, and returns
// the key's variable ("" when there is none), which the definition's env
// lines may not override. Nil-safe: a run of another kind adds nothing.
func (c *CLIRun) addEnv(env map[string]string) (keyVar string) {
	if c == nil {
		return ""
	}
	for _, line := range c.Invocation.Env {
		if k, v, ok := bytes.Cut([]byte(line), []byte("=")); ok {
			env[string(k)] = string(v)
		}
	}
	if c.key != "" && c.Invocation.KeyVar != "" {
		env[c.Invocation.KeyVar] = c.key
	}
	return c.Invocation.KeyVar
}

// finish hands the CLI's exit to its parser: the last frames, and whether
// the run ended ok.
func (c *CLIRun) finish(waitErr error, stderrTail []byte, emit func(*proto.Object)) bool {
	frames, status := c.parser.Finish(exitStatus(waitErr), stderrTail)
	for _, f := range frames {
		emit(f)
	}
	return status == "ok"
}

// exitStatus is a wait's status as a shell says it: 128+N for a death by
// signal N, -1 when there is none.
func exitStatus(waitErr error) int {
	var ee *exec.ExitError
	switch {
	case waitErr == nil:
		return 0
	case !errors.As(waitErr, &ee):
		return -1
	}
	ws, _ := ee.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// readCLI hands each stdout line to the CLI's parser; a line over
// cli.MaxLineBytes is dropped with a log frame (the parser would drop it
// too, but it is never held whole).
func readCLI(r io.Reader, p cli.Parser, out chan<- *proto.Object) {
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		line, tooLong, err := proto.ReadLine(br, cli.MaxLineBytes)
		switch {
		case tooLong:
			out <- proto.NewObject("type", proto.FrameLog, "text", fmt.Sprintf("ctxfs: stdout line %d over %d bytes dropped", n, cli.MaxLineBytes))
		case len(bytes.TrimSpace(line)) > 0:
			for _, f := range p.Parse(line) {
				out <- f
			}
		}
		if err != nil {
			return
		}
	}
}

// redactor wraps emit so that no frame carries the key's value, as it is
// or as JSON escapes it: defence in depth, the CLI should never print it.
func redactor(key string, emit func(*proto.Object)) func(*proto.Object) {
	if key == "" {
		return emit
	}
	quoted, _ := json.Marshal(key)
	escaped := quoted[1 : len(quoted)-1]
	return func(f *proto.Object) {
		line := f.Line()
		if bytes.Contains(line, escaped) {
			if g, err := proto.ParseObject(bytes.ReplaceAll(line, escaped, []byte("[key redacted]")), false); err == nil {
				f = g
			} else {
				f = errorFrame(syscall.EIO, "a frame that held the CLI's key was dropped")
			}
		}
		emit(f)
	}
}

// tail keeps the last tailBytes written to it: the end of a CLI's
// stderr, where it says why it failed.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

const tailBytes = 4 << 10

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > tailBytes {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-tailBytes:]...)
	}
	return len(b), nil
}

func (t *tail) bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]byte(nil), t.buf...)
}
