package inspect

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
)

// Trajectory prints the session as one ATIF document (SPEC 13). It opens
// the session's logs and hands them to ctx-trajectory
// (internal/cli/trajexport), which builds the document in an unlinked
// temporary file and prints it only once it has validated whole: a
// refused document prints nothing. Exit 0 printed, 1 refused or failed
// (ENODATA for a session with no messages: ATIF needs a step).
func Trajectory(e *clienv.Env, p *clienv.Parsed) int {
	w, err := clienv.Resolve(e, p, p.Args[0])
	if err != nil {
		return clienv.Fail(e, "trajectory", err, clienv.ExitFailed)
	}
	messages, err := os.Open(w.Loc.SessionFile(w.Session, abi.FileMessages))
	if err != nil {
		return clienv.Fail(e, "trajectory", clienv.Missing(w, w.Session, err), clienv.ExitFailed)
	}
	defer messages.Close()
	args := []string{w.Session, p.Args[0]}
	files := []*os.File{messages}
	// A session without events.jsonl (made by hand) has no tool calls.
	events, err := os.Open(w.Loc.SessionFile(w.Session, abi.FileEvents))
	switch {
	case err == nil:
		defer events.Close()
		args, files = append(args, "events"), append(files, events)
	case !errors.Is(err, fs.ErrNotExist):
		return clienv.Fail(e, "trajectory", err, clienv.ExitFailed)
	}
	helper, err := helperPath()
	if err != nil {
		return clienv.Fail(e, "trajectory", err, clienv.ExitFailed)
	}
	cmd := exec.Command(helper, args...)
	cmd.Stdout, cmd.Stderr = e.Stdout, e.Stderr
	cmd.ExtraFiles = files // descriptors 3 and 4 (trajexport.MessagesFD, EventsFD)
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return clienv.ExitOK
	case errors.As(err, &exit) && exit.ExitCode() > 0:
		return exit.ExitCode() // the helper said why
	}
	return clienv.Fail(e, "trajectory", err, clienv.ExitFailed)
}

// helperName is the program that builds the document.
const helperName = "ctx-trajectory"

// helperPath is ctx-trajectory beside this program (where make install
// puts both), else the one $PATH finds.
func helperPath() (string, error) {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), helperName)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
	}
	if p, err := exec.LookPath(helperName); err == nil {
		return p, nil
	}
	return "", abi.Errorf(syscall.ENOENT, "", "%s is not installed beside ctx nor on $PATH (make install puts it there)", helperName)
}
