package session

import (
	"bytes"
	"path"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/layout"
)

// cliHome is a CLI agent's HOME in its root/ (SPEC 16), and inside a jail.
const cliHome = "home/agent"

// prepareCLI readies a CLI agent's run (SPEC 16; agent.CLIRun): the CLI
// session to resume (meta.json's cli_session), its HOME in the agent's
// root/ with the invocation's files, written through the free tree's
// door as the run's uid (never as root through a path a user could have
// made), and where a session id the CLI names is recorded.
func (e *Engine) prepareCLI(rn *run) error {
	def := rn.spec.Def
	if def.CLI == nil {
		return nil
	}
	if rn.dir.root == "" {
		return abi.Errorf(syscall.ENOTSUP, "run", "a cli agent runs in its agent's root/")
	}
	resume := rn.s.metaString("cli_session")
	inv, err := def.CLIInvocation(resume)
	if err != nil {
		return err
	}
	home, tree := path.Join(rn.dir.root, cliHome), e.FreeTree()
	c := layout.Caller{Uid: rn.spec.Uid, Gid: rn.spec.Gid}
	if err := tree.MkdirAll(c, rn.dir.root, home, 0o700); err != nil {
		return err
	}
	for _, f := range inv.Files {
		p := path.Join(home, path.Clean("/"+f.Path))
		if err := tree.MkdirAll(c, rn.dir.root, path.Dir(p), 0o700); err != nil {
			return err
		}
		if err := tree.WriteFile(c, p, f.Data, 0o600); err != nil {
			return err
		}
	}
	rn.spec.Env["HOME"] = e.mountPath(home)
	if def.Isolation == agent.IsolationChroot {
		rn.spec.Env["HOME"] = "/" + cliHome
	}
	rn.spec.CLI = &agent.CLIRun{Resume: resume, Invocation: inv, Named: rn.s.recordCLISession}
	return nil
}

// recordCLISession records the CLI's session id: cli_session in
// meta.json (merged into it) and, for a UUID, index/by-uuid/<id>. A
// temp session keeps nothing.
func (s *sess) recordCLISession(id string) {
	if s.rel == "" {
		return
	}
	b, err := s.e.root.ReadFile(s.file(abi.FileMeta), maxRulesBytes)
	obj, perr := proto.ParseObject(bytes.TrimSpace(b), false)
	if err != nil || perr != nil {
		s.e.cfg.Log.Warn("cli session not recorded", "session", s.ref.Name, "cause", "meta.json unreadable")
		return
	}
	obj.Set("cli_session", id)
	if err := s.e.writeMeta(s, obj.Line()); err != nil {
		s.e.cfg.Log.Warn("cli session not recorded", "session", s.ref.Name, "cause", err.Error())
		return
	}
	if !abi.ValidUUID(id) {
		return
	}
	x, err := s.e.Index(s.ref.Container)
	if err == nil {
		err = x.SetEntry(abi.IndexByUUID, id, s.ref.Name)
	}
	if err != nil {
		s.e.cfg.Log.Warn("cli session not indexed", "session", s.ref.Name, "cause", err.Error())
	}
}
