package send

import (
	"fmt"
	"strconv"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/proto"
)

// opRestore is the restore op of an agent socket (SPEC 17), which the
// engine answers as a recorded run of its own.
const opRestore = "restore"

const RestoreHelp = `Puts files of the session back as they were before a tool changed them
(SPEC 17): --version N restores the file version N kept (see ctx agent
versions), --run R every file run R changed, as it was before R's first
change (PATH: only that file). The server restores as a run of its own,
through the session's uid and the agent's isolation, with the agent's
approvals; the restore is itself versioned, so it can be undone. In a
shared space a member restores only what its own runs changed (EPERM
otherwise). Its reply streams as ctx agent send's does, with the same
exit statuses.
`

// Restore sends the restore op and prints its reply as send does.
func Restore(e *clienv.Env, p *clienv.Parsed) int {
	w, err := clienv.Resolve(e, p, p.Args[0])
	if err != nil {
		return clienv.Fail(e, "restore", err, clienv.ExitUsage)
	}
	req, err := RestoreRequest(w, p, client.NewClientID())
	if err != nil {
		return clienv.Fail(e, "restore", err, clienv.ExitUsage)
	}
	return stream(e, w, req, newPrinter(e, w, "restore", p.On("json")))
}

// RestoreRequest builds the restore op: exactly one of --version (a
// version number, 1 or more) and --run, and PATH when given; scope and
// space as send sends them.
func RestoreRequest(w *clienv.Where, p *clienv.Parsed, id string) (*proto.Object, error) {
	version, byVersion := p.Vals["version"]
	run, byRun := p.Vals["run"]
	if byVersion == byRun {
		return nil, clienv.BadUsage("give exactly one of --version N and --run R")
	}
	req := proto.NewObject("op", opRestore, "id", id, "session", w.Session, "scope", w.Scope)
	if w.Scope == abi.ScopeShared {
		req.Set("space", w.Loc.Space)
	}
	if byVersion {
		n, err := strconv.Atoi(version)
		if err != nil || n < 1 {
			return nil, clienv.BadUsage(fmt.Sprintf("--version takes a version number (1 or more), not %q", version))
		}
		req.Set("version", n)
	} else {
		req.Set("run", run)
	}
	if len(p.Args) > 1 {
		req.Set("path", p.Args[1])
	}
	return req, nil
}
