package sessions

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/proto"
)

// DeleteArchived is `ctx agent session delete-archived AGENT SESSION
// [--yes] [--uid N] [--json]`: the archived session
// archived_sessions/AGENT/SESSION of the caller's home (root's --uid N:
// of N's) is deleted, whole, by the server (op archive, "archived":
// true), which gives its bytes of history back. As gc --delete, it is a
// preview without --yes, which asks the server that there is one and
// writes nothing. Archived sessions are otherwise read only: the mount
// refuses a user's rm of their files, which would leave half a session.
func DeleteArchived(e *clienv.Env, p *clienv.Parsed) int {
	w, err := clienv.ResolveLoc(e, p, p.Args[0])
	if err != nil {
		return clienv.Fail(e, "delete-archived", err, clienv.ExitUsage)
	}
	name := p.Args[1]
	if err := abi.CheckName("session", name); err != nil {
		return clienv.Fail(e, "delete-archived", err, clienv.ExitUsage)
	}
	req := proto.NewObject("op", proto.OpArchive, "session", name, "archived", true)
	if s := p.Str("uid"); s != "" {
		uid, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return clienv.UsageError(e, "delete-archived", "--uid takes a uid number")
		}
		req.Set("uid", uid) // the server decides who may name another's (root)
	}
	asJSON := p.On("json")
	out := gcOutcome{Session: name, Action: "delete", DryRun: !p.On("yes")}
	want := proto.FrameDeleted
	if out.DryRun {
		req.Set("dry_run", true)
		want = proto.FrameDeletable
	} else {
		req.Set("delete", true)
	}
	_, err = clienv.Call(e, w, req, want)
	err = serverReason(err)
	if err == nil && out.DryRun && !asJSON { // JSON lines carry dry_run instead
		fmt.Fprintln(e.Stdout, "ctx: dry-run; pass --yes to delete")
	}
	out.report(e, asJSON, err)
	if err != nil {
		return clienv.ExitFailed
	}
	return clienv.ExitOK
}

// serverReason is a refusal the server sent as an *abi.Error, so that
// gcOutcome.report prints its reason after its errno.
func serverReason(err error) error {
	var se *client.ServerError
	if !errors.As(err, &se) {
		return err
	}
	errno := se.Errno()
	if errno == 0 {
		errno = syscall.EIO
	}
	return abi.Errorf(errno, "", "%s", strings.TrimPrefix(se.Message, "archive: "))
}
