package chat

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/cli/approval"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/proto"
)

// A run that waits for a person in a chat: --approve TOOL answers the
// calls of TOOL; at a terminal the chat asks the rest, an approval with a
// single key, a question (ask_user) as a line. The answer goes on a new
// connection (the ops approve and answer) while the reply goes on; its
// recorded result comes back in the reply and is printed there. Ctrl+C at
// either prompt is Ctrl+C during the reply: it cancels the run.

// answer is the printer's Answer: whether the request o was answered here.
func (c *chat) answer(o *proto.Object) bool {
	return c.auto.Handle(o) || c.ask != nil && c.ask(o)
}

// approvalKeys are the keys of the approval prompt and their decisions.
var approvalKeys = map[rune]string{
	'a': proto.DecisionAllowOnce,
	'r': proto.DecisionAllowRun,
	'd': proto.DecisionDeny,
	's': proto.DecisionStop,
}

const approvalPrompt = "allow once / allow for this run / deny / stop? [a/r/d/s] "

// ask asks the person at the terminal to answer o.
func (tc *ttyChat) ask(o *proto.Object) bool {
	if o.Str("type") == proto.FrameQuestion {
		return tc.askQuestion(o)
	}
	return tc.askApproval(o)
}

func (tc *ttyChat) askApproval(o *proto.Object) bool {
	fmt.Fprintf(tc.out, "%s wants to run %s %s\n", tc.w.Loc.Agent, clienv.Printable(o.Str("name")), approval.What(o))
	decision, ok := tc.readKey(approvalPrompt)
	if !ok {
		io.WriteString(tc.out, "\n")
		tc.interrupt()
		return true
	}
	fmt.Fprintf(tc.out, "%s\n", decision)
	approval.Reply(tc.e, tc.w, "chat", approval.ApproveRequest(tc.w, o.Str("run"), o.Str("id"), decision, ""), proto.FrameApprovalResult)
	return true // a refusal (EALREADY: answered elsewhere) was reported; asking again would not help
}

// readKey shows prompt and reads keys in raw mode until one of
// approvalKeys (any case); false for Ctrl+C or the end of the input.
// Other keys ring the bell. The prompt shows only once the keys typed
// before it are dropped: a key typed after it always counts.
func (tc *ttyChat) readKey(prompt string) (decision string, ok bool) {
	tc.dropTypedAhead()
	if err := tc.raw(); err != nil {
		return "", false
	}
	defer tc.quiet()
	io.WriteString(tc.out, prompt)
	buf := make([]byte, 64)
	for {
		n, err := tc.keys.Read(buf)
		for s := string(buf[:n]); s != ""; {
			r, size := utf8.DecodeRuneInString(s)
			s = s[size:]
			if r == ctrlCKey {
				return "", false
			}
			if d, found := approvalKeys[r|0x20]; found { // r|0x20: an ASCII letter in lower case
				return d, true
			}
			io.WriteString(tc.out, "\a")
		}
		if err != nil {
			return "", false
		}
	}
}

// dropTypedAhead discards the keys typed before a prompt (while the reply
// streamed): a word typed ahead must not answer an approval.
func (tc *ttyChat) dropTypedAhead() {
	unix.IoctlSetInt(tc.fd, unix.TCFLSH, unix.TCIFLUSH)
	tc.keys.pending = nil
}

// askQuestion reads the answer as a line, with the chat's line editing.
// An empty line asks again; Ctrl+D leaves the question to another
// answer (its command is printed); Ctrl+C cancels the run.
func (tc *ttyChat) askQuestion(o *proto.Object) bool {
	fmt.Fprintf(tc.out, "%s asks:\n", tc.w.Loc.Agent)
	for _, l := range strings.Split(strings.TrimRight(o.Str("text"), "\n"), "\n") {
		fmt.Fprintf(tc.out, "  %s\n", clienv.Printable(l))
	}
	line, err := tc.readAnswer()
	if err == errInterrupted {
		tc.interrupt()
		return true
	}
	if err != nil {
		return false
	}
	approval.Reply(tc.e, tc.w, "chat", approval.AnswerRequest(tc.w, o.Str("run"), o.Str("id"), line), proto.FrameAnswer)
	return true
}

// errInterrupted is a Ctrl+C at the answer prompt.
var errInterrupted = fmt.Errorf("interrupted")

// readAnswer reads one non-empty line at the prompt "answer> ".
func (tc *ttyChat) readAnswer() (string, error) {
	tc.dropTypedAhead()
	if err := tc.raw(); err != nil {
		return "", err
	}
	defer tc.quiet()
	tc.t.SetPrompt("answer> ")
	defer tc.t.SetPrompt(tc.w.Loc.Agent + "> ")
	for {
		line, err := tc.t.ReadLine()
		if err == io.EOF && tc.keys.quit { // Ctrl+C at an empty line: not the end of the chat
			tc.keys.quit = false
			return "", errInterrupted
		}
		if err != nil && err != io.EOF {
			return "", err
		}
		if err == io.EOF {
			io.WriteString(tc.out, "\r\n")
			return "", err
		}
		if strings.TrimSpace(line) != "" {
			return line, nil
		}
	}
}

// interrupt hands the reply a Ctrl+C, as the signal would have.
func (tc *ttyChat) interrupt() {
	select {
	case tc.ctrlC <- struct{}{}:
	default:
	}
}
