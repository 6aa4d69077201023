// Package trajexport is the program `ctx agent trajectory` runs to build
// a session's ATIF document (ctx-trajectory): ctx resolves the session
// and opens its logs, and this program exports and validates the
// document from them. It is a program of its own so that ctx does not
// link the JSON Schema validator, whose package initialisation (it
// compiles every draft's meta-schema) cost every ctx command, whatever
// it did, about 2.3 ms at its start (docs/benchmarks.md, "ctx's start").
//
// It reads only the descriptors ctx hands it and writes only standard
// output, standard error and an unlinked temporary file; it never opens a
// path under the mount and never asks the server anything.
package trajexport

import (
	"errors"
	"io"
	"os"

	"github.com/ctxfs/ctxfs/internal/buildinfo"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/trajectory"
)

// Descriptors: messages.jsonl is descriptor 3, events.jsonl descriptor 4
// when the session has one (a session made by hand may not).
const (
	MessagesFD = 3
	EventsFD   = 4
)

// Main is ctx-trajectory SESSION AGENT [EVENTS]: it prints the session's
// document (SPEC 13) once it has validated whole, or an error as ctx
// prints one ("ctx: trajectory: …"), and returns the exit status ctx
// returns for it. EVENTS is "events" when descriptor 4 is events.jsonl.
func Main(args []string, stdout, stderr io.Writer) int {
	e := &clienv.Env{Stdout: stdout, Stderr: stderr, Getenv: os.Getenv, Uid: os.Getuid()}
	if len(args) < 2 || len(args) > 3 || len(args) == 3 && args[2] != "events" {
		return clienv.Fail(e, "trajectory", errors.New("ctx-trajectory is run by `ctx agent trajectory`, not by hand"), clienv.ExitUsage)
	}
	messages := os.NewFile(MessagesFD, "messages.jsonl")
	var events io.Reader // nil: no events.jsonl
	if len(args) == 3 {
		events = os.NewFile(EventsFD, "events.jsonl")
	}
	tmp, err := export(messages, events, args[0], args[1])
	if err == nil {
		defer tmp.Close()
		_, err = io.Copy(stdout, tmp)
	}
	if err != nil {
		return clienv.Fail(e, "trajectory", err, clienv.ExitFailed)
	}
	return clienv.ExitOK
}

// export exports the session into a temporary file, already unlinked so
// that nothing is left behind, and returns it rewound: a refused
// document prints nothing, and memory stays bounded however long the
// session is.
func export(messages, events io.Reader, session, agent string) (*os.File, error) {
	tmp, err := os.CreateTemp("", "ctx-trajectory-*.json")
	if err != nil {
		return nil, err
	}
	os.Remove(tmp.Name())
	info := trajectory.Info{SessionID: session, Agent: trajectory.Agent{Name: agent, Version: buildinfo.Version()}}
	err = trajectory.Export(tmp, messages, events, info)
	if err == nil {
		_, err = tmp.Seek(0, io.SeekStart)
	}
	if err != nil {
		tmp.Close()
		return nil, err
	}
	return tmp, nil
}
