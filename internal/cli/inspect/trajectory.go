package inspect

import (
	"errors"
	"io"
	"io/fs"
	"os"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/buildinfo"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/trajectory"
)

// Trajectory prints the session as one ATIF document (SPEC 13). The
// document is built in an unlinked temporary file and printed only once it
// has validated whole: a refused document prints nothing, and memory
// stays bounded however long the session is. Exit 0 printed, 1 refused or
// failed (ENODATA for a session with no messages: ATIF needs a step).
func Trajectory(e *clienv.Env, p *clienv.Parsed) int {
	w, err := clienv.Resolve(e, p, p.Args[0])
	if err != nil {
		return clienv.Fail(e, "trajectory", err, clienv.ExitFailed)
	}
	tmp, err := exportTemp(w, p.Args[0])
	if err == nil {
		defer tmp.Close()
		_, err = io.Copy(e.Stdout, tmp)
	}
	if err != nil {
		return clienv.Fail(e, "trajectory", err, clienv.ExitFailed)
	}
	return clienv.ExitOK
}

// exportTemp exports the session into a temporary file, already unlinked
// so that nothing is left behind, and returns it rewound.
func exportTemp(w *clienv.Where, agent string) (*os.File, error) {
	messages, err := os.Open(w.Loc.SessionFile(w.Session, abi.FileMessages))
	if err != nil {
		return nil, clienv.Missing(w, w.Session, err)
	}
	defer messages.Close()
	// A session without events.jsonl (made by hand) has no tool calls.
	events, err := os.Open(w.Loc.SessionFile(w.Session, abi.FileEvents))
	if errors.Is(err, fs.ErrNotExist) {
		events = nil
	} else if err != nil {
		return nil, err
	}
	defer events.Close()
	tmp, err := os.CreateTemp("", "ctx-trajectory-*.json")
	if err != nil {
		return nil, err
	}
	os.Remove(tmp.Name())
	info := trajectory.Info{SessionID: w.Session, Agent: trajectory.Agent{Name: agent, Version: buildinfo.Version()}}
	err = trajectory.Export(tmp, reader(messages), reader(events), info)
	if err == nil {
		_, err = tmp.Seek(0, io.SeekStart)
	}
	if err != nil {
		tmp.Close()
		return nil, err
	}
	return tmp, nil
}

// reader keeps a nil *os.File a nil io.Reader.
func reader(f *os.File) io.Reader {
	if f == nil {
		return nil
	}
	return f
}
