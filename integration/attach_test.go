package integration

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// stepperProgram is a jsonl agent that reports a tool call and a first
// message, then waits for the file named after its session in the
// directory RELEASE before it streams the rest: a test attaches in
// between.
const stepperProgram = `#!/bin/sh
read x
echo '{"type":"tool_call","id":"c1","name":"fs.read","arguments":{"path":"/etc/hosts"}}'
echo '{"type":"message","role":"assistant","content":[{"type":"text","text":"first"}]}'
while [ ! -e RELEASE/$CTX_SESSION ]; do sleep 0.05; done
echo '{"type":"tool_result","tool_call_id":"c1","content":"hello world"}'
echo '{"type":"delta","text":"sec"}'
sleep 0.2
echo '{"type":"delta","text":"ond"}'
echo '{"type":"message","role":"assistant","content":[{"type":"text","text":"second"}]}'
`

// failerProgram fails the way a misconfigured agent does: a reason on
// stderr, then a non-zero exit.
const failerProgram = "#!/bin/sh\nread x\necho starting >&2\necho 'boom: API key missing' >&2\nexit 3\n"

// newStepperServer starts a server with the stepper and failer agents, and
// returns it with the stepper's release directory.
func newStepperServer(t *testing.T) (*server, string) {
	t.Helper()
	requireFUSE(t)
	release := t.TempDir()
	s := newServerWith(t, func(s *server) {
		s.define("stepper", map[string]string{"program": strings.ReplaceAll(stepperProgram, "RELEASE", release)})
		s.define("failer", map[string]string{"program": failerProgram})
	})
	openToAll(t, s.root)
	return s, release
}

// releaseRun lets the stepper's run in session go on.
func releaseRun(t *testing.T, release, session string) {
	testkit.Must(t, os.WriteFile(filepath.Join(release, session), nil, 0o644))
}

// ctxProc is a real ctx process whose output is read as it comes.
type ctxProc struct {
	t        *testing.T
	cmd      *exec.Cmd
	mu       sync.Mutex
	out, err bytes.Buffer
	exited   chan struct{}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// startCtx starts ctx as root with CTX_ROOT set, stdout and stderr apart.
func startCtx(t *testing.T, s *server, args ...string) *ctxProc {
	t.Helper()
	return startCtxAs(t, s, nil, args...)
}

// startCtxAs is startCtx as c (nil: root).
func startCtxAs(t *testing.T, s *server, c *cred, args ...string) *ctxProc {
	t.Helper()
	p := &ctxProc{t: t, cmd: exec.Command(ctxBin, args...), exited: make(chan struct{})}
	p.cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/", "CTX_ROOT=" + s.root}
	if c != nil {
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: c.uid, Gid: c.gid, Groups: c.groups}}
	}
	p.cmd.Stdout, p.cmd.Stderr = lockedWriter{&p.mu, &p.out}, lockedWriter{&p.mu, &p.err}
	testkit.Must(t, p.cmd.Start())
	go func() { p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { p.cmd.Process.Kill(); <-p.exited })
	return p
}

// ctxOnTerminal runs ctx as c (nil: root) with stdout and stderr on one
// pseudo-terminal 100 columns wide, and returns what the terminal showed
// (CR LF as LF) and how ctx ended.
func ctxOnTerminal(t *testing.T, s *server, c *cred, args ...string) (string, error) {
	t.Helper()
	ptm, pts, err := pty.Open()
	testkit.Must(t, err)
	defer ptm.Close()
	testkit.Must(t, pty.Setsize(ptm, &pty.Winsize{Rows: 24, Cols: 100}))
	cmd := exec.Command(ctxBin, args...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/", "CTX_ROOT=" + s.root}
	if c != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: c.uid, Gid: c.gid, Groups: c.groups}}
	}
	cmd.Stdout, cmd.Stderr = pts, pts
	testkit.Must(t, cmd.Start())
	pts.Close()
	shownc := make(chan string, 1)
	go func() { b, _ := io.ReadAll(ptm); shownc <- string(b) }() // ends with EIO once ctx closed pts
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(cmdLimit):
		cmd.Process.Kill()
		t.Fatalf("ctx %q on a terminal did not end", args)
	}
	return strings.ReplaceAll(<-shownc, "\r\n", "\n"), err
}

func (p *ctxProc) stdout() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *ctxProc) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err.String()
}

// waitOut waits until stdout holds want.
func (p *ctxProc) waitOut(want string) {
	p.t.Helper()
	waitUntil(p.t, cmdLimit, func() bool { return strings.Contains(p.stdout(), want) }, func() string {
		return fmt.Sprintf("ctx %q: no %q on stdout; %s", p.cmd.Args[1:], want, p.printed())
	})
}

// printed is what the process wrote, for failures.
func (p *ctxProc) printed() string {
	return fmt.Sprintf("stdout %q stderr %q", p.stdout(), p.stderr())
}

// exitCode waits for the process to end.
func (p *ctxProc) exitCode() int {
	p.t.Helper()
	return exitWithin(p.t, p.cmd, p.exited, cmdLimit, p.printed)
}

// TestAttachGetsTheRestOnce: while a run waits half-way, two other
// processes attach to it (--json and text); each gets what the run
// recorded so far and then the rest as it streams, every frame exactly
// once: the attached --json output is the sender's, frame for frame.
func TestAttachGetsTheRestOnce(t *testing.T) {
	s, release := newStepperServer(t)
	sender := startCtx(t, s, "agent", "send", "stepper", "--session", "att", "--json", "go")
	sender.waitOut(`"text":"first"`)
	asJSON := startCtx(t, s, "agent", "attach", "stepper", "--session", "att", "--json")
	asText := startCtx(t, s, "agent", "resume", "stepper", "--session", "att")
	asJSON.waitOut(`"text":"first"`)
	asText.waitOut("first")
	releaseRun(t, release, "att")
	for _, p := range []*ctxProc{sender, asJSON, asText} {
		if code := p.exitCode(); code != 0 {
			t.Errorf("ctx %q: exit %d, stderr %q", p.cmd.Args[1:], code, p.stderr())
		}
	}
	sent, attached := sender.stdout(), asJSON.stdout()
	if attached != sent {
		t.Errorf("attach --json printed\n%s\nthe sender got\n%s", attached, sent)
	}
	types := regexp.MustCompile(`"type":"([a-z_]+)"`)
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(attached), "\n") {
		got = append(got, types.FindStringSubmatch(l)[1])
	}
	if want := "start tool_call message tool_result delta delta message done"; strings.Join(got, " ") != want {
		t.Errorf("attached frames %q, want %q", got, want)
	}
	if out := asText.stdout(); out != "first\nsecond\n" {
		t.Errorf("attach as text printed %q, want \"first\\nsecond\\n\"", out)
	}
	p := startCtx(t, s, "agent", "attach", "stepper", "--session", "att")
	if code := p.exitCode(); code != 1 || p.stderr() != "ctx: attach: no run is active in session att\n" || p.stdout() != "" {
		t.Errorf("attach after the end: exit %d stdout %q stderr %q", code, p.stdout(), p.stderr())
	}
}

// TestSendInterruptThenAttach: Ctrl+C detaches a send and names the
// command that follows the run again; that command does.
func TestSendInterruptThenAttach(t *testing.T) {
	s, release := newStepperServer(t)
	sender := startCtx(t, s, "agent", "send", "stepper", "--session", "intr", "go")
	sender.waitOut("first")
	sender.cmd.Process.Signal(syscall.SIGINT)
	if code := sender.exitCode(); code != 130 {
		t.Fatalf("send after Ctrl+C: exit %d, want 130; stderr %q", code, sender.stderr())
	}
	m := regexp.MustCompile(`^ctx: send: interrupted; run (ctx-[0-9a-f]{32}) goes on: (ctx agent attach stepper --session intr ctx-[0-9a-f]{32}) follows it again, ctx agent cancel stepper (ctx-[0-9a-f]{32}) stops it\n$`).
		FindStringSubmatch(sender.stderr())
	if m == nil || !strings.HasSuffix(m[2], m[1]) || m[3] != m[1] {
		t.Fatalf("Ctrl+C message %q does not name attach for the run", sender.stderr())
	}
	attach := startCtx(t, s, strings.Fields(m[2])[1:]...)
	attach.waitOut("first")
	releaseRun(t, release, "intr")
	if code := attach.exitCode(); code != 0 || attach.stdout() != "first\nsecond\n" {
		t.Errorf("%s: exit %d stdout %q stderr %q", m[2], code, attach.stdout(), attach.stderr())
	}
}

// TestCancelSharedRun: a run of a shared space's session (or a temp
// session) is cancelled by the command a detached send names (SPEC 11:
// --shared SPACE on any command). cancel took no --shared, and without
// it the run, found only in its own space, was "not running" (exit 1)
// while it went on.
func TestCancelSharedRun(t *testing.T) {
	s, _ := newStepperServer(t) // never released: the run waits until cancelled
	s.spaceAdd("team", 1234)
	ann := member(1001, 1234)
	for _, scope := range []string{"--shared team", "--scope temp"} { // a temp session's run likewise
		sender := startCtxAs(t, s, ann, append(append([]string{"agent", "send", "stepper", "--session", "sh"}, strings.Fields(scope)...), "go")...)
		sender.waitOut("first")
		sender.cmd.Process.Signal(syscall.SIGINT)
		if code := sender.exitCode(); code != 130 {
			t.Fatalf("send %s after Ctrl+C: exit %d, want 130; stderr %q", scope, code, sender.stderr())
		}
		m := regexp.MustCompile(`, (ctx agent cancel stepper ` + regexp.QuoteMeta(scope) + ` (ctx-[0-9a-f]{32})) stops it\n$`).FindStringSubmatch(sender.stderr())
		if m == nil {
			t.Fatalf("Ctrl+C message %q does not name a cancel with %s", sender.stderr(), scope)
		}
		out, errs, code := ctxSplitAs(t, s, ann, strings.Fields(m[1])[1:]...)
		if code != 0 || out != "cancelled "+m[2]+"\n" {
			t.Fatalf("%s: exit %d stdout %q stderr %q", m[1], code, out, errs)
		}
	}
	state := s.mnt("shared/team/agent/stepper/session/sh/state")
	eventually(t, 10*time.Second, "the shared session's state to be cancelled", func() bool {
		b, _ := os.ReadFile(state)
		return string(b) == "cancelled\n"
	})
	// By client id, in any session of the space; the send it stops exits 1.
	sender := startCtxAs(t, s, ann, "agent", "send", "stepper", "--shared", "team", "--session", "sh2", "--id", "job-2", "go")
	sender.waitOut("first")
	out, errs, code := ctxSplitAs(t, s, ann, "agent", "cancel", "stepper", "--shared", "team", "job-2")
	if code != 0 || !regexp.MustCompile(`^cancelled ctx-[0-9a-f]{32}\n$`).MatchString(out) {
		t.Fatalf("cancel by client id: exit %d stdout %q stderr %q", code, out, errs)
	}
	if code := sender.exitCode(); code != 1 {
		t.Errorf("the cancelled send: exit %d, want 1; %s", code, sender.printed())
	}
}

// flooderProgram says "first", waits for RELEASE/$CTX_SESSION, then
// streams about 1.4 MB of deltas (more than a reader may fall behind, 1
// MiB, but not so much that the sender, which reads, could fall that far
// behind on a loaded machine) and ends with "last".
const flooderProgram = `#!/bin/sh
read x
echo '{"type":"message","role":"assistant","content":[{"type":"text","text":"first"}]}'
while [ ! -e RELEASE/$CTX_SESSION ]; do sleep 0.05; done
pad=$(printf '%01000d' 0)
i=0
while [ $i -lt 1300 ]; do echo '{"type":"delta","text":"'$pad'"}'; i=$((i+1)); done
echo '{"type":"message","role":"assistant","content":[{"type":"text","text":"last"}]}'
`

// TestAttachFellBehind: an attach that does not read (stopped) while
// the run streams more than the server keeps for it is cut; it says so,
// names the command that follows the run again, and exits 1; that
// command prints the run to its end.
func TestAttachFellBehind(t *testing.T) {
	requireFUSE(t)
	release := t.TempDir()
	s := newServerWith(t, func(s *server) {
		s.define("flooder", map[string]string{"program": strings.ReplaceAll(flooderProgram, "RELEASE", release)})
	})
	openToAll(t, s.root)
	sender := startCtx(t, s, "agent", "send", "flooder", "--session", "flood", "go")
	sender.waitOut("first")
	slow := startCtx(t, s, "agent", "attach", "flooder", "--session", "flood")
	slow.waitOut("first")
	// Stopped in every thread before the flood: kill(SIGSTOP) returns
	// before, and a thread of ctx still running would read on.
	testkit.Must(t, pause(slow.cmd.Process.Pid))
	releaseRun(t, release, "flood")
	if code := sender.exitCode(); code != 0 {
		t.Fatalf("send: exit %d, stderr %q", code, sender.stderr())
	}
	testkit.Must(t, resume(slow.cmd.Process.Pid))
	code := slow.exitCode()
	m := regexp.MustCompile(`^ctx: attach: EAGAIN: the connection fell behind run (ctx-[0-9a-f]{32}), which goes on: (ctx agent attach flooder --session flood ctx-[0-9a-f]{32}) follows it again\n$`).
		FindStringSubmatch(slow.stderr())
	if code != 1 || m == nil || !strings.HasSuffix(m[2], m[1]) {
		t.Fatalf("the slow attach: exit %d, stderr %q", code, slow.stderr())
	}
	again := startCtx(t, s, strings.Fields(m[2])[1:]...)
	if code := again.exitCode(); code != 0 || again.stdout() != "first\nlast\n" {
		t.Errorf("%s: exit %d stdout %q stderr %q", m[2], code, again.stdout(), again.stderr())
	}
}

// TestSendToolLinesOnTerminal: on a terminal, send shows the run id and
// one line per tool call and result; in a pipe, only the text.
func TestSendToolLinesOnTerminal(t *testing.T) {
	s, release := newStepperServer(t)
	releaseRun(t, release, "tty")
	releaseRun(t, release, "pipe")
	shown, err := ctxOnTerminal(t, s, nil, "agent", "send", "stepper", "--session", "tty", "go")
	testkit.Must(t, err)
	want := regexp.MustCompile(`^run ctx-[0-9a-f]{32}\n→ fs\.read \{"path":"/etc/hosts"\}\nfirst\n← fs\.read ok, 11 bytes\nsecond\n$`)
	if !want.MatchString(shown) {
		t.Errorf("on a terminal send showed %q", shown)
	}
	out, errs, code := ctxSplit(t, s, "agent", "send", "stepper", "--session", "pipe", "go")
	if out != "first\nsecond\n" || errs != "" || code != 0 {
		t.Errorf("in a pipe: stdout %q stderr %q exit %d", out, errs, code)
	}
}

// TestFailedRunShowsAgentStderr: a failed run shows the last lines of the
// agent's stderr after its error; a replay of it reads them from the
// session's events.jsonl.
func TestFailedRunShowsAgentStderr(t *testing.T) {
	s, _ := newStepperServer(t)
	tail := "ctx: send: last lines of the agent's stderr:\n  starting\n  boom: API key missing\n"
	_, errs, code := ctxSplit(t, s, "agent", "send", "failer", "--id", "f1", "hi")
	if code != 1 || errs != "ctx: error: EIO: run: agent program exited with status 3\n"+tail {
		t.Errorf("failed send: exit %d stderr %q", code, errs)
	}
	_, errs, code = ctxSplit(t, s, "agent", "send", "failer", "--id", "f1", "hi")
	if code != 1 || errs != tail {
		t.Errorf("replayed send: exit %d stderr %q", code, errs)
	}
	out, errs, code := ctxSplit(t, s, "agent", "send", "failer", "--json", "hi")
	if code != 1 || errs != "" || !strings.Contains(out, `"text":"boom: API key missing"`) {
		t.Errorf("--json: exit %d stdout %q stderr %q", code, out, errs)
	}
}
