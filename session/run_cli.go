package session

import (
	"path"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent"
	"github.com/ctxfs/ctxfs/session/layout"
)

// prepareCLI readies a CLI agent's run (SPEC 16; agent.CLIRun): the CLI
// session to resume (meta.json's cli_session), its HOME in the agent's
// root/ (home/agent) holding the invocation's files, made through the
// free tree's door as the run's uid (never as root through a path a user
// could have made), and where a session id the CLI names is recorded.
func (e *Engine) prepareCLI(rn *run) error {
	if rn.spec.Def.CLI == nil {
		return nil
	} else if rn.dir.root == "" {
		return abi.Errorf(syscall.ENOTSUP, "run", "a cli agent runs in its agent's root/")
	}
	resume := rn.s.metaString("cli_session")
	inv, err := rn.spec.Def.CLIInvocation(resume)
	home, c := path.Join(rn.dir.root, "home/agent"), layout.Caller{Uid: rn.spec.Uid, Gid: rn.spec.Gid}
	if err == nil {
		err = e.FreeTree().MkdirAll(c, rn.dir.root, home, 0o700)
	}
	for i := 0; err == nil && i < len(inv.Files); i++ {
		err = e.FreeTree().WriteFileAll(c, rn.dir.root, path.Join(home, path.Clean("/"+inv.Files[i].Path)), inv.Files[i].Data)
	}
	rn.spec.Env["HOME"] = e.mountPath(home)
	if rn.spec.Def.Isolation == agent.IsolationChroot {
		rn.spec.Env["HOME"] = "/home/agent"
	}
	rn.spec.CLI = &agent.CLIRun{Resume: resume, Invocation: inv, Named: rn.s.recordCLISession}
	return err
}

// recordCLISession records the CLI's session id: cli_session merged into
// meta.json and, for a UUID, index/by-uuid/<id>. A temp session keeps
// nothing; what cannot be recorded is logged.
func (s *sess) recordCLISession(id string) {
	if s.rel == "" {
		return
	}
	obj, err := s.metaObject()
	if err == nil {
		obj.Set("cli_session", id)
		err = s.e.writeMeta(s, obj.Line())
	}
	if x, xerr := s.e.Index(s.ref.Container); err == nil && abi.ValidUUID(id) {
		if err = xerr; err == nil {
			err = x.SetEntry(abi.IndexByUUID, id, s.ref.Name)
		}
	}
	if err != nil {
		s.e.cfg.Log.Warn("cli session not recorded", "session", s.ref.Name, "cli_session", id, "cause", err.Error())
	}
}
