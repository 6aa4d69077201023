package chat

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/internal/cli/approval"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/internal/cli/send"
	"github.com/ctxfs/ctxfs/internal/cli/transcript"
	"github.com/ctxfs/ctxfs/proto"
)

// `ctx agent chat` (alias repl): each line is one send to the session, with
// a fresh client id, printed as `ctx agent send` prints it. On a terminal it
// is an interactive prompt (see terminal); otherwise lines are read from
// stdin until end of file. Lines that start with / are chat commands in
// both modes, so that a script can switch sessions too.

// cancelWait bounds the wait for a cancelled run's done frame. The server
// sends it after SIGTERM and a short grace (SPEC section 10); waiting
// longer than this means something is wrong, and the prompt must come back.
const cancelWait = 15 * time.Second

// cancelCallLimit bounds the cancel request itself.
const cancelCallLimit = 5 * time.Second

const chatHelp = `/session [NAME]  show the session, or switch to session NAME
/history         print the session's messages
/help            this list
/exit            leave (so do Ctrl+D, and Ctrl+C at an empty prompt)
//TEXT           send /TEXT
Ctrl+C while a reply streams cancels that run.
`

// chat is one chat: the agent and the session it sends to now.
type chat struct {
	e *clienv.Env
	p *clienv.Parsed
	w *clienv.Where
	// interrupts returns a channel that receives (or is closed) when the
	// user presses Ctrl+C during one send, and a func to call after it.
	interrupts func() (<-chan struct{}, func())
	// stopOnInterrupt: without a terminal, Ctrl+C cancels the run and then
	// ends the chat, as it would end any other command of a script.
	stopOnInterrupt bool
	// auto answers the approvals of --approve TOOL; ask, at a terminal,
	// asks the person the rest (ask.go).
	auto *approval.Auto
	ask  func(*proto.Object) bool
}

func Run(e *clienv.Env, p *clienv.Parsed) int {
	w, err := clienv.Resolve(e, p, p.Args[0])
	if err != nil {
		return clienv.Fail(e, "chat", err, clienv.ExitUsage)
	}
	c := &chat{e: e, p: p, w: w, auto: approval.NewAuto(e, w, "chat", p.All("approve"))}
	if in, out, ok := terminals(e); ok {
		return c.terminal(in, out)
	}
	c.interrupts = func() (<-chan struct{}, func()) {
		ctx, stop := e.Interrupt()
		return ctx.Done(), stop
	}
	c.stopOnInterrupt = true
	return c.lines()
}

// lines is chat without a terminal: one send per line of stdin. The exit
// status is the worst of the lines' (0 ok, 1 failed or cancelled, 2
// refused, 130 interrupted), as if each line were a `ctx agent send`.
func (c *chat) lines() int {
	sc := bufio.NewScanner(c.e.Stdin)
	sc.Buffer(nil, abi.MaxRequestBytes+1) // a longer line could not be sent anyway
	worst := clienv.ExitOK
	for sc.Scan() {
		code, quit := c.line(strings.TrimSuffix(sc.Text(), "\r"))
		worst = max(worst, code)
		if quit {
			return worst
		}
	}
	err := sc.Err()
	if errors.Is(err, bufio.ErrTooLong) {
		err = abi.Errorf(syscall.EMSGSIZE, "", "a line of stdin is over %d bytes", abi.MaxRequestBytes)
	}
	if err != nil {
		worst = max(worst, clienv.Fail(c.e, "chat", err, clienv.ExitFailed))
	}
	return worst
}

// line handles one line of input: nothing for a blank line, a chat command
// for a line starting with /, else a send. quit ends the chat.
func (c *chat) line(s string) (code int, quit bool) {
	switch {
	case strings.TrimSpace(s) == "":
		return clienv.ExitOK, false
	case strings.HasPrefix(s, "//"):
		s = s[1:]
	case strings.HasPrefix(s, "/"):
		return c.command(s)
	}
	code, interrupted := c.send(s)
	if interrupted && c.stopOnInterrupt {
		return clienv.ExitInterrupted, true
	}
	return code, false
}

// command runs one chat command.
func (c *chat) command(s string) (code int, quit bool) {
	name, arg, _ := strings.Cut(strings.TrimSpace(s), " ")
	arg = strings.TrimSpace(arg)
	switch name {
	case "/exit", "/quit":
		return clienv.ExitOK, true
	case "/help":
		io.WriteString(c.e.Stdout, chatHelp)
	case "/session":
		return c.switchSession(arg), false
	case "/history":
		return c.history(), false
	default:
		fmt.Fprintf(c.e.Stderr, "ctx: chat: unknown command %s (/help lists them)\n", name)
		return clienv.ExitUsage, false
	}
	return clienv.ExitOK, false
}

// switchSession makes name the session of the following sends; it is
// checked as --session is. Without a name it says which session is used.
func (c *chat) switchSession(name string) int {
	if name != "" {
		if err := abi.CheckName("session", name); err != nil {
			fmt.Fprintf(c.e.Stderr, "ctx: chat: %s\n", clienv.Describe("chat", err))
			return clienv.ExitUsage
		}
		c.w.Session = name
	}
	fmt.Fprintf(c.e.Stdout, "session %s\n", c.w.Session)
	return clienv.ExitOK
}

// history prints the session's messages as `ctx agent history` does. A
// session that has no messages yet (one just switched to) is not an error.
func (c *chat) history() int {
	err := printHistoryFile(c.e.Stdout, c.w.Loc.SessionFile(c.w.Session, abi.FileMessages))
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(c.e.Stdout, "session %s has no messages yet\n", c.w.Session)
		return clienv.ExitOK
	}
	if err != nil {
		return clienv.Fail(c.e, "history", err, clienv.ExitFailed)
	}
	return clienv.ExitOK
}

func printHistoryFile(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return transcript.PrintHistory(w, f)
}

func (c *chat) socket() string {
	return c.w.Loc.Socket()
}

// send sends input as one run and prints the reply as it streams. The
// first Ctrl+C cancels the run and waits, bounded, for its done frame; a
// second one stops waiting. interrupted reports a Ctrl+C.
func (c *chat) send(input string) (code int, interrupted bool) {
	intr, stop := c.interrupts()
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // closes the connection; the reader goroutine then ends
	conn, err := client.Dial(ctx, c.socket())
	if err != nil {
		return clienv.Fail(c.e, "send", err, clienv.ExitUsage), false
	}
	// As in send: a write error is kept, because the server's error frame
	// is the better answer.
	id := client.NewClientID()
	sendErr := conn.Send(send.SendRequest(c.w, c.p, id, input))
	var readErr error
	frames := readFrames(ctx, conn, &readErr)
	r := &reply{c: c, id: id, pr: send.NewSendPrinter(c.e.Stdout, c.e.Stderr, false, c.recorded())}
	r.pr.ShowTools(c.e)
	r.pr.Where, r.pr.Answer = c.w, c.answer
	detached := r.wait(frames, intr)
	r.pr.Finish()
	if detached {
		fmt.Fprintf(c.e.Stderr, "ctx: chat: stopped waiting for run %s; it may still be running (ctx agent status %s)\n", r.pr.Run, c.w.Loc.Agent)
		return clienv.ExitFailed, true
	}
	if r.pr.Cut && r.pr.Done == nil {
		return send.FellBehind(c.e, c.w, r.pr), r.asked // as send: the run goes on
	}
	r.sayCancelled()
	if code := r.pr.ExitStatus(readErr); code >= 0 {
		return code, r.asked
	}
	return clienv.Fail(c.e, "send", clienv.NoReply(sendErr, readErr), clienv.ExitUsage), r.asked
}

// recorded is the printer's source of a replayed run's text, as in send.
func (c *chat) recorded() func(string) string {
	if c.w.Scope == abi.ScopeTemp {
		return nil
	}
	return func(run string) string { return send.RecordedText(c.w, run) }
}

// readFrames passes conn's frames to the returned channel and closes it at
// the end of the reply; *errp is then the read error (nil at end of file).
func readFrames(ctx context.Context, conn *client.Conn, errp *error) <-chan client.Frame {
	ch := make(chan client.Frame)
	go func() {
		defer close(ch)
		for {
			f, err := conn.Next()
			if err != nil {
				if err != io.EOF {
					*errp = err
				}
				return
			}
			select {
			case ch <- f:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}

// reply is one send's reply as it streams.
type reply struct {
	c     *chat
	id    string // the send's client id
	pr    *send.SendPrinter
	asked bool // Ctrl+C was pressed and the run was asked to cancel
}

// wait prints frames until the reply ends, cancelling the run on the first
// interrupt. It returns true if it stopped waiting before the end: a second
// interrupt, or no done frame within cancelWait of the cancel.
func (r *reply) wait(frames <-chan client.Frame, intr <-chan struct{}) (detached bool) {
	var timeout <-chan time.Time
	for {
		select {
		case f, ok := <-frames:
			if !ok {
				return false
			}
			r.pr.Frame(f)
		case _, more := <-intr:
			if r.asked {
				return true
			}
			if !more {
				intr = nil // a closed channel would fire again at once
			}
			r.asked = true
			r.cancel()
			timeout = time.After(cancelWait)
		case <-timeout:
			return true
		}
	}
}

// cancel asks the server to cancel the run: by its run id once the start
// frame named it, before that by the send's client id in its session.
func (r *reply) cancel() {
	w := r.c.w
	id := r.pr.Run
	if id == "" {
		id = r.id
	}
	req := proto.NewObject("op", proto.OpCancel, "id", id, "session", w.Session, "scope", w.Scope)
	if w.Scope == abi.ScopeShared {
		req.Set("space", w.Loc.Space) // a run id is found only in its own container
	}
	ctx, stop := context.WithTimeout(context.Background(), cancelCallLimit)
	defer stop()
	frames, err := client.Call(ctx, r.c.socket(), req)
	if se := client.Refusal(frames); err == nil && se != nil {
		err = se
	}
	if err != nil {
		fmt.Fprintf(r.c.e.Stderr, "ctx: chat: cancel: %s\n", clienv.Describe("cancel", err))
	}
}

// sayCancelled prints the one line that tells a cancelled run from one
// that failed; a run that finished before the cancel needs no words.
func (r *reply) sayCancelled() {
	if r.asked && r.pr.Done != nil && r.pr.Done.Str("status") == abi.StateCancelled {
		fmt.Fprintf(r.c.e.Stderr, "cancelled run %s\n", r.pr.Done.Str("run"))
	}
}

// The terminal is raw only while the prompt reads a line: term.Terminal
// needs that for its line editing and history. While a line is handled it
// is in the user's own mode without echo, so that output gets the usual
// newline handling, Ctrl+C is SIGINT (which cancels the run), and keys
// typed ahead wait unseen for the next prompt instead of garbling the reply.

// terminals returns stdin and stdout when both are terminals.
func terminals(e *clienv.Env) (in, out *os.File, ok bool) {
	in, inOK := e.Stdin.(*os.File)
	out, outOK := e.Stdout.(*os.File)
	if !inOK || !outOK || !term.IsTerminal(int(in.Fd())) || !term.IsTerminal(int(out.Fd())) {
		return nil, nil, false
	}
	return in, out, true
}

// ttyChat is chat at a terminal.
type ttyChat struct {
	*chat
	fd   int          // stdin
	orig unix.Termios // the mode the chat started in, restored at every exit
	// mode serialises mode changes: a signal's exit restores the terminal
	// and keeps the lock, so that the loop cannot make it raw again.
	mode  sync.Mutex
	out   *os.File
	t     *term.Terminal
	keys  *keyReader
	busy  atomic.Bool   // a line is being handled: Ctrl+C is a signal, not a key
	ctrlC chan struct{} // SIGINTs while busy
}

func (c *chat) terminal(in, out *os.File) int {
	tc := &ttyChat{chat: c, fd: int(in.Fd()), out: out, ctrlC: make(chan struct{}, 1)}
	orig, err := unix.IoctlGetTermios(tc.fd, unix.TCGETS)
	if err != nil {
		return clienv.Fail(c.e, "chat", err, clienv.ExitFailed)
	}
	tc.orig = *orig
	defer tc.restore() // also when a panic unwinds
	tc.keys = &keyReader{r: in}
	tc.t = term.NewTerminal(struct {
		io.Reader
		io.Writer
	}{tc.keys, out}, c.w.Loc.Agent+"> ")
	tc.t.AutoCompleteCallback = tc.keys.callback
	c.interrupts = tc.interrupts
	c.ask = tc.ask
	defer tc.watchSignals()()
	tc.resize()
	fmt.Fprintf(out, "chat with %s in session %s; /help lists the commands, Ctrl+D leaves\n", c.w.Loc.Agent, c.w.Session)
	return tc.loop()
}

// loop reads and handles lines until the user leaves. Leaving is exit 0
// whatever the runs did: each run's outcome was shown as it ended.
func (tc *ttyChat) loop() int {
	for {
		if err := tc.raw(); err != nil {
			return clienv.Fail(tc.e, "chat", err, clienv.ExitFailed)
		}
		tc.busy.Store(false)
		line, err := tc.t.ReadLine()
		if err == io.EOF {
			io.WriteString(tc.out, "\r\n") // leave the shell's prompt a line of its own
			return clienv.ExitOK
		}
		if err != nil && err != term.ErrPasteIndicator {
			tc.restore() // before printing: a raw terminal does not turn \n into \r\n
			return clienv.Fail(tc.e, "chat", err, clienv.ExitFailed)
		}
		tc.busy.Store(true)
		if err := tc.quiet(); err != nil {
			return clienv.Fail(tc.e, "chat", err, clienv.ExitFailed)
		}
		if _, quit := tc.line(line); quit {
			return clienv.ExitOK
		}
	}
}

func (tc *ttyChat) raw() error {
	tc.mode.Lock()
	defer tc.mode.Unlock()
	_, err := term.MakeRaw(tc.fd)
	return err
}

// quiet is the mode lines are handled in: the original one without echo.
func (tc *ttyChat) quiet() error {
	t := tc.orig
	t.Lflag &^= unix.ECHO | unix.ECHONL
	tc.mode.Lock()
	defer tc.mode.Unlock()
	return unix.IoctlSetTermios(tc.fd, unix.TCSETS, &t)
}

func (tc *ttyChat) restore() {
	tc.mode.Lock()
	defer tc.mode.Unlock()
	tc.setOrig()
}

func (tc *ttyChat) setOrig() {
	t := tc.orig
	unix.IoctlSetTermios(tc.fd, unix.TCSETS, &t)
}

func (tc *ttyChat) resize() {
	if w, h, err := term.GetSize(int(tc.out.Fd())); err == nil {
		tc.t.SetSize(w, h)
	}
}

// interrupts hands a send the Ctrl+Cs pressed during it; one pressed
// before it (while a command ran) is dropped.
func (tc *ttyChat) interrupts() (<-chan struct{}, func()) {
	select {
	case <-tc.ctrlC:
	default:
	}
	return tc.ctrlC, func() {}
}

// watchSignals handles signals for the whole chat and returns the func
// that stops it. Ctrl+C is SIGINT only while a line is handled, and goes
// to the send; any other ending signal (or a SIGINT from kill at the
// prompt) restores the terminal before exiting, since a terminal left raw
// leaves the shell unusable.
func (tc *ttyChat) watchSignals() (stop func()) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGWINCH)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case sig := <-sigs:
				tc.signal(sig.(syscall.Signal))
			}
		}
	}()
	return func() { signal.Stop(sigs); close(done) }
}

func (tc *ttyChat) signal(sig syscall.Signal) {
	switch {
	case sig == unix.SIGWINCH:
		tc.resize()
	case sig == unix.SIGINT && tc.busy.Load():
		select {
		case tc.ctrlC <- struct{}{}:
		default: // one is pending already
		}
	default:
		tc.mode.Lock() // never unlocked: the process ends
		tc.setOrig()
		io.WriteString(tc.out, "\n")
		os.Exit(128 + int(sig))
	}
}

// ctrlCKey is what keyReader turns Ctrl+C into: a private-use rune, which
// term.Terminal hands to its AutoCompleteCallback together with the line.
// Ctrl+C itself makes ReadLine return io.EOF whatever the line holds, and
// a half-typed line should be dropped, not end the chat.
const ctrlCKey = '\uf8ff'

var ctrlCBytes = []byte(string(ctrlCKey))

// keyReader is the terminal's input with Ctrl+C replaced by ctrlCKey.
type keyReader struct {
	r       io.Reader
	pending []byte // read and translated, not yet returned
	quit    bool   // Ctrl+C at an empty line: the next Read ends the input
}

// Read returns input up to and including the next ctrlCKey, so that the
// callback has seen it (and may have set quit) before the next Read.
func (k *keyReader) Read(p []byte) (int, error) {
	if k.quit {
		return 0, io.EOF
	}
	if len(k.pending) == 0 {
		buf := make([]byte, len(p))
		n, err := k.r.Read(buf)
		if n == 0 {
			return 0, err
		}
		k.pending = bytes.ReplaceAll(buf[:n], []byte{3}, ctrlCBytes)
	}
	end := len(k.pending)
	if i := bytes.Index(k.pending, ctrlCBytes); i >= 0 {
		end = i + len(ctrlCBytes)
	}
	n := copy(p, k.pending[:end])
	k.pending = k.pending[n:]
	return n, nil
}

// callback is the terminal's AutoCompleteCallback: Ctrl+C drops the line,
// and at an empty line it ends the chat.
func (k *keyReader) callback(line string, pos int, key rune) (string, int, bool) {
	if key != ctrlCKey {
		return "", 0, false
	}
	if line == "" {
		k.quit = true
	}
	return "", 0, true
}
