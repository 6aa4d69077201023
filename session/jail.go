package session

import (
	"path"

	"github.com/ctxfs/ctxfs/agent"
)

// prepareJail readies a chroot-isolated run's jail (agent.Jail): the
// mountpoints it needs inside the agent's root/, made through the store's
// door and owned by the run's uid (a directory that exists is left as it
// is; a symlink or anything else there fails the run), and root/ opened
// for the trampoline. The returned func closes what it opened.
func (e *Engine) prepareJail(rn *run) (closeJail func(), err error) {
	if rn.spec.Def.Isolation != agent.IsolationChroot || rn.dir.root == "" {
		return func() {}, nil
	}
	for _, d := range agent.JailDirs(e.cfg.Root) {
		if err := e.mkdirAll(path.Join(rn.dir.root, d), rn.dir.own); err != nil {
			return nil, err
		}
	}
	root, err := e.root.OpenDir(rn.dir.root)
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
