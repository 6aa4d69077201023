package trampoline

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
)

// ControlSocketEnv names a run's control socket in its environment; a
// jailed run that has one finds it bound into its jail (JailMain).
const ControlSocketEnv = "CTX_CONTROL_SOCKET"

// JailCommand is the hidden command of the ctxfs binary that builds a
// run's jail, starts its program there and waits for it: `ctxfs __jail
// ARGS...` (see jailSpec.args), with the setup pipe at setupFD, the run's
// environment at envFD and the jail's root directory at jailRootFD.
const JailCommand = "__jail"

// jailRootFD is the descriptor of the jail's root directory in JailMain.
const jailRootFD = 5

// controlFD is, when the run has a control socket, that socket (opened
// O_PATH) in JailMain: it is bound into the jail at jailControl, with the
// ctxfs binary at jailCtxfs for the helpers the program starts (`ctxfs
// __permit`).
const controlFD = 6

// jailToolsDir is where, under the mount root, the jail shows the run's
// control socket and the ctxfs binary; not a name a ctx path can have.
const jailToolsDir = ".ctxfs"

// JailControl and JailCtxfs are where a jailed run finds its control
// socket and the ctxfs binary (for `ctxfs __permit`).
func JailControl(mountRoot string) string { return path.Join(mountRoot, jailToolsDir, "control") }
func JailCtxfs(mountRoot string) string   { return path.Join(mountRoot, jailToolsDir, "ctxfs") }

// jailDevices are the host devices shown in the jail's /dev: what shells
// and ordinary programs expect to find, and nothing that reaches hardware
// or another process.
var jailDevices = []string{"null", "zero", "full", "random", "urandom"}

// JailDirs are the mountpoints a jail needs inside its root/, relative to
// it: the caller makes them before the run (SPEC 10: a mountpoint
// directory a run needed may stay, empty). "proc" is among them: the
// coding-agent CLIs read /proc/self/exe (Codex stops without it), so a
// root/ without proc/ gets one made as the uid rather than a jail with no
// /proc; one that is a symlink or a file fails the run.
func JailDirs(mountRoot string) []string {
	return []string{strings.TrimPrefix(path.Clean(mountRoot), "/"), "dev", "proc"}
}

// jailSpec is the part of a jail that crosses the exec into JailMain, as
// arguments.
type jailSpec struct {
	uid, gid   uint32
	mountRoot  string
	sessionDir string
	home       string
	cwd        string
	progName   string   // the program's name under MountRoot/agent/
	progHost   string   // the program's host path, bound at MountRoot/agent/progName
	extra      []string // the program's arguments (a CLI agent's invocation)
	control    bool     // the run has a control socket at controlFD (from its environment, not args)
}

// JailRun is what a jailed run's trampoline is told in its arguments
// (JailMain): the run's uid and gid; where the ctx tree is mounted, the
// session's directory and the home under it, the working directory
// inside the jail; the program's name (shown at MountRoot/agent/NAME),
// its host path and its arguments.
type JailRun struct {
	Uid, Gid                         uint32
	MountRoot, SessionDir, Home, Cwd string
	ProgName, ProgHost               string
	ProgArgs                         []string
}

// Args are r's trampoline arguments, for Launch.
func (r JailRun) Args() []string {
	j := jailSpec{uid: r.Uid, gid: r.Gid, mountRoot: r.MountRoot, sessionDir: r.SessionDir, home: r.Home,
		cwd: r.Cwd, progName: r.ProgName, progHost: r.ProgHost, extra: r.ProgArgs}
	return append([]string{JailCommand}, j.args()...)
}

func (j *jailSpec) args() []string {
	return append([]string{strconv.FormatUint(uint64(j.uid), 10), strconv.FormatUint(uint64(j.gid), 10),
		j.mountRoot, j.sessionDir, j.home, j.cwd, j.progName, j.progHost}, j.extra...)
}

// parseJailArgs reads what args wrote, and checks what JailMain relies
// on: absolute clean paths, and the session and home under the mount root.
func parseJailArgs(a []string) (*jailSpec, error) {
	if len(a) < 8 {
		return nil, fmt.Errorf("usage: ctxfs %s UID GID MOUNTROOT SESSIONDIR HOME CWD NAME PROGRAM [ARG...]", JailCommand)
	}
	uid, err1 := strconv.ParseUint(a[0], 10, 32)
	gid, err2 := strconv.ParseUint(a[1], 10, 32)
	j := &jailSpec{uint32(uid), uint32(gid), a[2], a[3], a[4], a[5], a[6], a[7], a[8:], false}
	switch {
	case err1 != nil || err2 != nil:
		return nil, fmt.Errorf("bad uid or gid %q %q", a[0], a[1])
	case !cleanAbs(j.mountRoot) || j.mountRoot == "/" || !cleanAbs(j.cwd) || !cleanAbs(j.progHost):
		return nil, fmt.Errorf("paths must be absolute and clean")
	case j.sessionDir != "" && !under(j.sessionDir, j.mountRoot), !under(j.home, j.mountRoot):
		return nil, fmt.Errorf("the session and home must be under %s", j.mountRoot)
	case !abi.ValidName(j.progName):
		return nil, fmt.Errorf("bad program name %q", j.progName)
	}
	return j, nil
}

func cleanAbs(p string) bool { return path.IsAbs(p) && path.Clean(p) == p }

// under reports whether p is a path strictly below dir (both clean).
func under(p, dir string) bool { return cleanAbs(p) && strings.HasPrefix(p, dir+"/") }

// rel is p relative to dir, for p under dir.
func rel(p, dir string) string { return strings.TrimPrefix(p, dir+"/") }

// JailAttr starts the jail's trampoline as root, in its own process group
// (a cancel signals the group: the trampoline and its program), as the
// init of a new PID namespace: nothing outside is visible or signalable
// from inside, and when the init ends the kernel kills everything left in
// the namespace, a setsid child included. It dies with the server
// (Pdeathsig: strictly, with the server's thread that started it, and no
// thread that starts a run ever ends before the server). Its mount
// namespace is made inside (JailMain), once it holds the trees the jail is
// built from: open_tree clones only mounts of the caller's own namespace.
func JailAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
}
