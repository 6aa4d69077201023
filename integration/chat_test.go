package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"golang.org/x/sys/unix"
)

// chatLimit bounds every wait on a chat: output, a state, the exit.
const chatLimit = 20 * time.Second

// ptyChat is `ctx agent chat` running on a pseudo-terminal, as a person
// would run it.
type ptyChat struct {
	t      *testing.T
	cmd    *exec.Cmd
	ptm    *os.File
	pts    *os.File     // the chat's terminal
	orig   unix.Termios // its mode before the chat
	mu     sync.Mutex
	out    []byte // everything the chat wrote so far
	seen   int    // out[:seen] was matched by earlier expects
	exited chan struct{}
}

func startChat(t *testing.T, s *server, args ...string) *ptyChat {
	t.Helper()
	cmd := exec.Command(ctxBin, append([]string{"agent", "chat"}, args...)...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "TERM=xterm", "HOME=/", "CTX_ROOT=" + s.root}
	return startOnPty(t, cmd)
}

// startOnPty starts cmd on a new pseudo-terminal that is its controlling
// terminal, as a person's terminal is (TestStop* run a shell so).
func startOnPty(t *testing.T, cmd *exec.Cmd) *ptyChat {
	t.Helper()
	ptm, pts, err := pty.Open()
	testkit.Must(t, err)
	testkit.Must(t, pty.Setsize(ptm, &pty.Winsize{Rows: 50, Cols: 200}))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pts, pts, pts
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true} // Ctrl+C signals it
	c := &ptyChat{t: t, cmd: cmd, ptm: ptm, pts: pts, exited: make(chan struct{})}
	c.orig = c.termios()
	testkit.Must(t, cmd.Start())
	go c.read()
	go func() { cmd.Wait(); close(c.exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-c.exited
		pts.Close()
		ptm.Close()
	})
	return c
}

// termios is the terminal's mode now. The test keeps its own descriptor
// of the terminal, so the mode can be read after the chat exits.
func (c *ptyChat) termios() unix.Termios {
	c.t.Helper()
	tio, err := unix.IoctlGetTermios(int(c.pts.Fd()), unix.TCGETS)
	testkit.Must(c.t, err)
	return *tio
}

// modeIs checks the terminal's local modes: what the prompt (raw) or a
// streaming reply (no echo, Ctrl+C a signal) needs, or the original ones.
func (c *ptyChat) modeIs(what string, want uint32) {
	c.t.Helper()
	const mask = unix.ECHO | unix.ICANON | unix.ISIG
	if got := c.termios().Lflag & mask; got != want&mask {
		c.t.Errorf("%s: terminal lflag %#x, want %#x", what, got, want&mask)
	}
}

func (c *ptyChat) restored(what string) {
	c.t.Helper()
	now := c.termios()
	if now.Iflag != c.orig.Iflag || now.Oflag != c.orig.Oflag || now.Lflag != c.orig.Lflag || now.Cflag != c.orig.Cflag {
		c.t.Errorf("%s: terminal mode %+v, want it restored to %+v", what, now, c.orig)
	}
}

// read collects the chat's output until the terminal closes.
func (c *ptyChat) read() {
	buf := make([]byte, 4096)
	for {
		n, err := c.ptm.Read(buf)
		c.mu.Lock()
		c.out = append(c.out, buf[:n]...)
		c.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// keys types into the terminal.
func (c *ptyChat) keys(s string) {
	c.t.Helper()
	if _, err := c.ptm.WriteString(s); err != nil {
		c.t.Fatalf("type %q: %v", s, err)
	}
}

// expect waits until want appears in output not matched before, and moves
// past it, so that the same text expected twice must appear twice.
func (c *ptyChat) expect(want string) {
	c.t.Helper()
	waitUntil(c.t, chatLimit, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		i := bytes.Index(c.out[c.seen:], []byte(want))
		if i >= 0 {
			c.seen += i + len(want)
		}
		return i >= 0
	}, func() string { return fmt.Sprintf("no %q; output so far:\n%q", want, c.output()) })
}

// exitCode waits for the chat to end and returns its exit status.
func (c *ptyChat) exitCode() int {
	c.t.Helper()
	return exitWithin(c.t, c.cmd, c.exited, chatLimit, func() string { return fmt.Sprintf("output:\n%q", c.output()) })
}

// ctrlD ends the chat at its prompt with Ctrl+D, which must exit 0.
func (c *ptyChat) ctrlD() {
	c.t.Helper()
	c.keys("\x04")
	if code := c.exitCode(); code != 0 {
		c.t.Errorf("Ctrl+D: exit status %d, want 0; output:\n%q", code, c.output())
	}
}

func (c *ptyChat) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.out)
}

// userMessages is the text of each user message of root's session of
// agent, read through the mount.
func (s *server) userMessages(t *testing.T, agent, session string) []string {
	t.Helper()
	b, err := os.ReadFile(s.mnt(filepath.Join("home/0/agent", agent, "session", session, "messages.jsonl")))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	testkit.Must(t, err)
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m struct{ Role, Content string }
		json.Unmarshal([]byte(l), &m) // content that is not a string stays ""
		if m.Role == "user" {
			out = append(out, m.Content)
		}
	}
	return out
}

func (s *server) stateOf(agent, session string) string {
	b, _ := os.ReadFile(s.mnt(filepath.Join("home/0/agent", agent, "session", session, "state")))
	return strings.TrimSpace(string(b))
}

// TestChatTerminal drives the chat at a real terminal against the echo
// agent: a line and its answer, the up arrow recalling a line, /session,
// /history, an unknown command, and Ctrl+D leaving with status 0.
func TestChatTerminal(t *testing.T) {
	s := newFuseServer(t)
	c := startChat(t, s, "coder")
	c.expect("coder> ")
	c.modeIs("at the prompt", 0)
	c.keys("hello there\r")
	c.expect("hello there") // the line as typed
	c.expect("hello there") // the answer
	c.expect("coder> ")
	c.keys("/session other\r")
	c.expect("session other")
	c.expect("coder> ")
	c.keys("to other\r")
	c.expect("to other")
	c.expect("to other")
	c.expect("coder> ")
	c.keys("\x1b[A\r") // up arrow recalls "to other"
	c.expect("to other")
	c.expect("to other")
	c.expect("coder> ")
	if got := s.userMessages(t, "coder", "other"); len(got) != 2 || got[0] != "to other" || got[1] != "to other" {
		t.Errorf("session other holds user messages %q, want \"to other\" twice", got)
	}
	if got := s.userMessages(t, "coder", "default"); len(got) != 1 || got[0] != "hello there" {
		t.Errorf("session default holds user messages %q, want only \"hello there\"", got)
	}
	c.keys("/history\r")
	c.expect("user:")
	c.expect("assistant:")
	c.expect("coder> ")
	c.keys("/nope\r")
	c.expect("unknown command /nope")
	c.expect("coder> ")
	c.ctrlD()
	c.restored("after Ctrl+D")
}

// TestChatTerminalCancel: Ctrl+C while a run streams cancels that run and
// brings the prompt back; Ctrl+C at the empty prompt then leaves, status 0.
func TestChatTerminalCancel(t *testing.T) {
	requireFUSE(t)
	s := newServerWith(t, func(s *server) {
		s.define("sleeper", map[string]string{"abi": "text", "program": "#!/bin/sh\nread x; echo \"got $x\"; exec sleep 60\n"})
	})
	openToAll(t, s.root)
	c := startChat(t, s, "sleeper", "--session", "nap")
	c.expect("sleeper> ")
	c.keys("wake up\r")
	c.expect("got wake up") // the run streams: the terminal is no longer raw
	if st := s.stateOf("sleeper", "nap"); st != "active" {
		t.Fatalf("state %q while the run streams, want active", st)
	}
	c.modeIs("while a reply streams", c.orig.Lflag&^unix.ECHO)
	c.keys("\x03")
	c.expect("cancelled run ")
	c.expect("sleeper> ")
	eventually(t, chatLimit, "state cancelled", func() bool { return s.stateOf("sleeper", "nap") == "cancelled" })
	c.keys("\x03")
	if code := c.exitCode(); code != 0 {
		t.Errorf("Ctrl+C at the prompt: exit status %d, want 0; output:\n%q", code, c.output())
	}
	c.restored("after Ctrl+C at the prompt")
}

// TestChatTerminalTypeahead: keys typed while a reply streams are not
// echoed into it; they wait for the next prompt, which takes them.
func TestChatTerminalTypeahead(t *testing.T) {
	requireFUSE(t)
	release := filepath.Join(t.TempDir(), "release")
	s := newServerWith(t, func(s *server) {
		s.define("waiter", map[string]string{"abi": "text",
			"program": "#!/bin/sh\nread x; echo \"got $x\"\nwhile [ ! -e " + release + " ]; do sleep 0.05; done\n"})
	})
	openToAll(t, s.root)
	c := startChat(t, s, "waiter")
	c.expect("waiter> ")
	c.keys("one\r")
	c.expect("got one\r\n")
	c.keys("ahead\r")
	testkit.Must(t, os.WriteFile(release, nil, 0o644))
	c.expect("waiter> ahead\r\n")
	// Echoed while the reply streamed, "ahead" would come before the prompt.
	if out := c.output(); !strings.Contains(out, "got one\r\nwaiter> ahead\r\n") {
		t.Errorf("typeahead shown before the prompt took it:\n%q", out)
	}
	c.expect("got ahead\r\n")
	c.expect("waiter> ")
	c.ctrlD()
}

// TestChatTerminalSignal: a signal that ends the chat at the prompt
// restores the terminal, which it found in its usual mode, not raw.
func TestChatTerminalSignal(t *testing.T) {
	s := newFuseServer(t)
	c := startChat(t, s, "coder")
	c.expect("coder> ")
	c.cmd.Process.Signal(syscall.SIGTERM)
	if code := c.exitCode(); code != 128+int(syscall.SIGTERM) {
		t.Errorf("SIGTERM: exit status %d, want %d", code, 128+int(syscall.SIGTERM))
	}
	c.restored("after SIGTERM")
}

// TestChatPipe: without a terminal each line of stdin is one send, printed
// as send prints it.
func TestChatPipe(t *testing.T) {
	s := newFuseServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), chatLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctxBin, "agent", "chat", "coder")
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/", "CTX_ROOT=" + s.root}
	cmd.Stdin = strings.NewReader("one\ntwo\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || string(out) != "one\ntwo\n" {
		t.Fatalf("out %q err %v stderr %q", out, err, stderr.String())
	}
	if got := s.userMessages(t, "coder", "default"); len(got) != 2 || got[0] != "one" || got[1] != "two" {
		t.Errorf("user messages %q, want one and two", got)
	}
}

// TestChatTerminalToolLines: chat shows a run's tool calls and results as
// one line each on a terminal, as send does.
func TestChatTerminalToolLines(t *testing.T) {
	s, release := newStepperServer(t)
	releaseRun(t, release, "default")
	c := startChat(t, s, "stepper")
	c.expect("stepper> ")
	c.keys("go\r")
	c.expect(`→ fs.read {"path":"/etc/hosts"}`)
	c.expect("first")
	c.expect("← fs.read ok, 11 bytes")
	c.expect("second")
	c.expect("stepper> ")
	c.ctrlD()
}
