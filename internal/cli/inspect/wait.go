package inspect

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
)

const WaitHelp = `Prints the status of a child run that a run of the session started
(agent.create, SPEC 18), then its result.md (the child's last assistant
text), from the session's context/child/CHILD/ through the mount.
Exit 0 when the child is done, 1 when it ended in error, 130 when it was
cancelled, 69 while it is not finished (pending or active). --block waits
until it is finished.
`

// Exit codes of ctx agent wait besides ExitOK (done), ExitFailed (error)
// and ExitInterrupted (cancelled).
const ExitNotFinished = 69

// waitPoll is how often --block reads the status file again.
const waitPoll = 200 * time.Millisecond

// Wait prints a child's status and result.md.
func Wait(e *clienv.Env, p *clienv.Parsed) int {
	w, err := clienv.Resolve(e, p, p.Args[0])
	if err != nil {
		return clienv.Fail(e, "wait", err, clienv.ExitFailed)
	}
	child := p.Args[1]
	if !abi.IsRunID(child) {
		return clienv.Fail(e, "wait", abi.Errorf(syscall.EINVAL, "", "%q is not a run id", child), clienv.ExitUsage)
	}
	dir := abi.DirContext + "/child/" + child + "/"
	for {
		status, err := os.ReadFile(w.Loc.SessionFile(w.Session, dir+"status"))
		if errors.Is(err, fs.ErrNotExist) {
			if merr := clienv.Missing(w, w.Session, err); merr != err {
				err = merr
			} else {
				err = abi.Errorf(syscall.ENOENT, "", "no child %s in session %s", child, w.Session)
			}
		}
		if err != nil {
			return clienv.Fail(e, "wait", err, clienv.ExitFailed)
		}
		st := strings.TrimSpace(string(status))
		code, known := statusCodes[st]
		if !known {
			// context/ is the user's own tree: a status the server did
			// not write could be waited on forever.
			return clienv.Fail(e, "wait", abi.Errorf(syscall.EIO, "", "child %s's status %q is none of pending, active, done, error, cancelled", child, st), clienv.ExitFailed)
		}
		finished := code != ExitNotFinished
		if finished || !p.On("block") {
			out := clienv.ForTerminal(e.Stdout) // a child model's text: see clienv.TerminalText
			fmt.Fprintln(out, st)
			if finished {
				result, _ := os.ReadFile(w.Loc.SessionFile(w.Session, dir+"result.md"))
				out.Write(result)
				if len(result) > 0 && result[len(result)-1] != '\n' {
					fmt.Fprintln(out)
				}
			}
			return code
		}
		time.Sleep(waitPoll)
	}
}

// statusCodes is the exit code of each status a child's status file may
// hold (SPEC 18, session/children's Status values, which the client does
// not link); a child that is pending or active is not finished.
var statusCodes = map[string]int{
	"done":      clienv.ExitOK,
	"error":     clienv.ExitFailed,
	"cancelled": clienv.ExitInterrupted,
	"pending":   ExitNotFinished,
	"active":    ExitNotFinished,
}
