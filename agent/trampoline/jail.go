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
// ARGS...` (see JailRun.Args), with the setup pipe at setupFD, the run's
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

// JailRun is what a jailed run's trampoline is told in its arguments
// (JailMain): the run's uid and gid and its supplementary groups (a
// shared space's group, else none); where the ctx tree is mounted, the
// session's directory ("" for a temp session) and the home under it, the
// working directory inside the jail; the program's name (shown at
// MountRoot/agent/NAME), its host path (bound there) and its arguments
// (a CLI agent's invocation).
type JailRun struct {
	Uid, Gid                         uint32
	Groups                           []uint32
	MountRoot, SessionDir, Home, Cwd string
	ProgName, ProgHost               string
	ProgArgs                         []string
}

// Args are r's trampoline arguments, for Launch.
func (r JailRun) Args() []string {
	return append([]string{JailCommand, strconv.FormatUint(uint64(r.Uid), 10), strconv.FormatUint(uint64(r.Gid), 10), formatGroups(r.Groups),
		r.MountRoot, r.SessionDir, r.Home, r.Cwd, r.ProgName, r.ProgHost}, r.ProgArgs...)
}

// formatGroups writes groups as one argument: decimal ids separated by
// commas, "" for none.
func formatGroups(groups []uint32) string {
	ids := make([]string, len(groups))
	for i, g := range groups {
		ids[i] = strconv.FormatUint(uint64(g), 10)
	}
	return strings.Join(ids, ",")
}

// parseGroups reads what formatGroups wrote.
func parseGroups(s string) ([]uint32, error) {
	if s == "" {
		return nil, nil
	}
	var groups []uint32
	for _, id := range strings.Split(s, ",") {
		g, err := strconv.ParseUint(id, 10, 32)
		if err != nil {
			return nil, err
		}
		groups = append(groups, uint32(g))
	}
	return groups, nil
}

// jailSpec is a jail as JailMain knows it: its arguments, and whether the
// run has a control socket at controlFD (from its environment, not args).
type jailSpec struct {
	JailRun
	control bool
}

// parseJailArgs reads what JailRun.Args wrote after the command, and
// checks what JailMain relies on: absolute clean paths, and the session
// and home under the mount root.
func parseJailArgs(a []string) (*jailSpec, error) {
	if len(a) < 9 {
		return nil, fmt.Errorf("usage: ctxfs %s UID GID GROUPS MOUNTROOT SESSIONDIR HOME CWD NAME PROGRAM [ARG...]", JailCommand)
	}
	uid, err1 := strconv.ParseUint(a[0], 10, 32)
	gid, err2 := strconv.ParseUint(a[1], 10, 32)
	groups, err3 := parseGroups(a[2])
	j := &jailSpec{JailRun: JailRun{Uid: uint32(uid), Gid: uint32(gid), Groups: groups, MountRoot: a[3], SessionDir: a[4], Home: a[5], Cwd: a[6],
		ProgName: a[7], ProgHost: a[8], ProgArgs: a[9:]}}
	switch {
	case err1 != nil || err2 != nil || err3 != nil:
		return nil, fmt.Errorf("bad uid, gid or groups %q %q %q", a[0], a[1], a[2])
	case !cleanAbs(j.MountRoot) || j.MountRoot == "/" || !cleanAbs(j.Cwd) || !cleanAbs(j.ProgHost):
		return nil, fmt.Errorf("paths must be absolute and clean")
	case j.SessionDir != "" && !under(j.SessionDir, j.MountRoot), !under(j.Home, j.MountRoot):
		return nil, fmt.Errorf("the session and home must be under %s", j.MountRoot)
	case !abi.ValidName(j.ProgName):
		return nil, fmt.Errorf("bad program name %q", j.ProgName)
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
