package agent

import (
	"os"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/trampoline"
)

// Jail is what a run with `isolation chroot` needs beyond its Spec: the
// tree it is confined to and what is shown inside (SPEC section 10).
//
// Inside, the program sees its agent's root/ (bound without set-user-id
// and device files), a read-only tmpfs at MountRoot that holds only its own
// session directory (bound from the mount at the same path, so
// CTX_SESSION_DIR means the same inside and out), its home's directory
// (empty) and its program at MountRoot/agent/NAME, and a tmpfs /dev with
// null, zero, full, random and urandom, and a read-only procfs at /proc
// of the run's own PID namespace (buildProc). Nothing else of the host: no
// other session or home, no store. Every mount is made in a mount
// namespace of the run's own, private from the start, which holds nothing
// else once the jail is pivoted into (not even through /proc/PID/root from
// outside), and every process in a PID namespace of the run's own: both
// go when the program ends (JailMain).
type Jail struct {
	// Root is the agent's root/ directory, opened by the caller through
	// the store's door; the caller closes it after Run.
	Root *os.File
	// Mountpoints are made by the caller inside Root before the run,
	// through the store's door, owned by the run's uid: MountRoot's path,
	// "dev" and "proc" (JailDirs). JailMain opens them without following a
	// symlink and refuses anything else.
	Cwd        string // the working directory inside the jail, absolute
	MountRoot  string // where the ctx tree is mounted; the same path inside
	SessionDir string // the session's directory under MountRoot; "" (a temp session) binds none
	Home       string // the run's CTX_HOME under MountRoot, shown empty
}

// jailCommand is how launcher starts a jailed run: the jail
// trampoline's arguments (it runs as root, to mount; the program it
// starts runs as uid/gid and Spec.Groups) and the jail's root directory.
func jailCommand(s Spec) (args []string, root *os.File, err error) {
	if Enter == "" {
		return nil, nil, abi.Errorf(syscall.ENOTSUP, "run", "chroot isolation needs the ctxfs server")
	}
	if os.Geteuid() != 0 {
		return nil, nil, abi.Errorf(syscall.ENOTSUP, "run", "chroot isolation needs a server running as root")
	}
	if s.Def.Kind != abi.KindAgent {
		return nil, nil, abi.Errorf(syscall.EINVAL, "run", "a model has no chroot")
	}
	r := trampoline.JailRun{Uid: s.Uid, Gid: s.Gid, Groups: s.Groups, MountRoot: s.Jail.MountRoot, SessionDir: s.Jail.SessionDir,
		Home: s.Jail.Home, Cwd: s.Jail.Cwd, ProgName: s.Def.Name, ProgHost: s.Def.Program, ProgArgs: s.programArgs()}
	return r.Args(), s.Jail.Root, nil
}
