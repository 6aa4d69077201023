package session

import (
	"errors"
	"io/fs"
	"path"
	"strings"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/agent/trampoline"
	"github.com/ctxfs/ctxfs/session/layout"
)

// What a run needs before its program starts: a chroot run's jail, the
// snapshots of its rules and skills, a CLI agent's HOME and resume.

// prepareJail readies a chroot-isolated run's jail (agent.Jail): the
// mountpoints it needs inside the agent's root/, made through the store's
// door and owned by the run's uid (a directory that exists is left as it
// is; a symlink or anything else there fails the run), and root/ opened
// for the trampoline. The returned func closes what it opened.
func (e *Engine) prepareJail(rn *run) (closeJail func(), err error) {
	if rn.spec.Def.Isolation != def.IsolationChroot || rn.dir.root == "" {
		return func() {}, nil
	}
	for _, d := range trampoline.JailDirs(e.cfg.Root) {
		if err := layout.MkdirAll(e.root, path.Join(rn.dir.root, d), rn.dir.own); err != nil {
			return nil, err
		}
	}
	// O_PATH: the trampoline only changes into the root and clones it
	// as a tree (open_tree), which asks the store's filesystem nothing,
	// where an O_RDONLY open is an OPENDIR and a RELEASEDIR on a FUSE or
	// distributed store (storefs.OpenDirPath).
	root, err := e.root.OpenDirPath(rn.dir.root)
	if err != nil {
		return nil, err
	}
	sessionDir := ""
	if rn.s.rel != "" { // a temp session has no directory to show
		sessionDir = rn.spec.Env["CTX_SESSION_DIR"]
	}
	rn.spec.Jail = &agent.Jail{Root: root, Cwd: path.Join("/", rn.dir.rel), MountRoot: e.cfg.Root,
		SessionDir: sessionDir, Home: rn.spec.Env["CTX_HOME"]}
	// The program wrote root/ through the jail's bind of the store, which
	// the free trees' quota does not see: its uid is counted again at its
	// next charge.
	return func() { root.Close(); e.limits.Free.Recount(rn.spec.Uid) }, nil
}

// runRules are a run's merged rules (SPEC section 10): the agent's global
// rules, then every AGENTS.md from the chroot root down to the cwd. A
// model API run's system prompt starts with them.
func (e *Engine) runRules(rn *run) string {
	var parts []string
	if defn := rn.spec.Def; defn.AgentsMD != "" {
		parts = append(parts, strings.TrimRight(defn.AgentsMD, "\n"))
	}
	if s := rn.s; rn.spec.Dir != "/" && s.ref.Kind == abi.KindAgent {
		parts = append(parts, e.chrootRules(s.ref.Container.ChrootRel(rn.spec.Uid), rn.spec.Env["CTX_CWD"])...)
	}
	return strings.Join(parts, "\n\n")
}

// writeSnapshots replaces the session's AGENTS.md (the run's rules) and
// SKILLS.md (the skills' metadata) before a run (SPEC section 10: the
// latest run's). They are observability only; a snapshot that cannot be
// written does not fail the run. A temp session keeps none.
func (e *Engine) writeSnapshots(rn *run, rules string) {
	s, defn := rn.s, rn.spec.Def
	if s.rel == "" {
		return
	}
	var skills strings.Builder
	for _, sk := range defn.Skills {
		skills.WriteString("- name: " + sk.Name + "\n  description: " + sk.Description + "\n  path: " + sk.Path + "\n")
	}
	if rules != "" {
		rules += "\n"
	}
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	s.putSnapshotLocked(abi.FileAgentsMD, rules)
	s.putSnapshotLocked(abi.FileSkillsMD, skills.String())
}

// putSnapshotLocked makes value the session's snapshot name. A snapshot is
// history of its home (historyFiles): what it grows by is charged first.
// One that is not this run's is removed, its bytes given back: a run with
// no rules (or skills), or one whose snapshot the home has no room for,
// left the one before, and so showed rules the latest run did not have.
// Caller holds s.fileMu.
func (s *sess) putSnapshotLocked(name, value string) {
	e := s.e
	if value != "" {
		done, err := e.chargeResize(s.ref.Home, s.file(name), int64(len(value)))
		if err == nil {
			s.writeFileLocked(name, value)
			done(true)
			delete(s.gone, name)
			return
		}
		e.cfg.Log.Warn("snapshot not kept", "file", s.ref.Rel()+"/"+name, "err", err)
	}
	if s.gone[name] {
		return
	}
	held := e.heldSize(s.file(name))
	if held == 0 && !s.present[name] {
		s.snapshotGone(name)
		return
	}
	e.derived.Drop(s.file(name)) // a value still to be written would make it again
	for _, rel := range []string{s.file(name), layout.SpareOf(s.file(name))} {
		if err := e.root.Remove(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
			e.cfg.Log.Warn("snapshot not removed", "file", rel, "err", err)
			return
		}
	}
	s.present[name] = false
	s.snapshotGone(name)
	if c := e.historyCharge(s.ref.Home); c != nil {
		c.Give(held)
	}
	e.changed(s.ref.Rel() + "/" + name)
}

// snapshotGone records that the store holds no snapshot name: the next
// run without one need not look (putSnapshotLocked alone makes one, under
// s.fileMu, which the caller holds).
func (s *sess) snapshotGone(name string) {
	if s.gone == nil {
		s.gone = map[string]bool{}
	}
	s.gone[name] = true
}

// chrootRules reads AGENTS.md in the chroot root (rootRel, in the store)
// and in each directory down to cwd, outermost first. The tree belongs to
// the agent's user and the server may be root, so every read goes through
// the store's door: a symlink anywhere on the way is not followed (that
// directory's rules are left out) and the reads are bounded together: a
// file that would take them past maxRulesBytes is left out, as one over
// it is. Bounded each, one file hard-linked in every directory of a deep
// cwd made a run hold, and its session's snapshot keep, the file's size
// times the depth (30 MiB for 30 directories, 2 GiB at PATH_MAX).
func (e *Engine) chrootRules(rootRel, cwd string) []string {
	var rules []string
	dir, left := rootRel, int64(maxRulesBytes)
	read := func() {
		if b, err := e.root.ReadFile(dir+"/"+abi.FileAgentsMD, left); err == nil {
			rules = append(rules, strings.TrimRight(string(b), "\n"))
			left -= int64(len(b))
		}
	}
	read()
	for _, part := range strings.Split(strings.Trim(cwd, "/"), "/") {
		if part == "" || part == "." {
			continue
		}
		dir += "/" + part
		read()
	}
	return rules
}

// maxRulesBytes bounds the AGENTS.md files read into a snapshot, together.
const maxRulesBytes = 1 << 20

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
	if rn.spec.Def.Isolation == def.IsolationChroot {
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
