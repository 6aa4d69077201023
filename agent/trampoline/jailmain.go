package trampoline

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Mount flags of the jail's trees: nothing in a user's tree may gain
// privileges or reach a device.
const jailAttrs = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV

// beneath is how JailMain resolves a path inside a tree a user made: never
// through a symlink, never out of the tree or onto another mount.
var beneath = unix.OpenHow{
	Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_DIRECTORY,
	Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
}

// JailMain is `ctxfs __jail ...`, the init of the run's PID namespace
// (see JailAttr): it builds the run's jail (agent.Jail says what it
// holds) in a mount namespace of its own, pivots into it and detaches the
// host's tree, starts the program there as the run's uid, gid and
// supplementary groups (JailRun.Groups), no capabilities, no_new_privs and the jail's seccomp filter,
// and with the run's environment (read from envFD: this process itself
// has none), then reaps until the program ends and exits with its
// status; the kernel then kills whatever else the run left in the
// namespace. It reports a failure to
// start on the setup pipe and closes the pipe once the program runs.
//
// The work is done on one locked thread: a mount namespace, a root, a
// working directory, a seccomp filter and a capability bounding set belong
// to a thread, and the program is forked from it. The trees are detached
// copies (open_tree) taken while still in the host's namespace and
// attached by descriptor (move_mount) inside the new one, so no path a user
// could have changed is followed as root.
func JailMain(args []string) int {
	runtime.LockOSThread()
	CloseOnExec()
	j, err := parseJailArgs(args)
	if err != nil {
		return setupFailed(syscall.EINVAL, "%v", err)
	}
	env, err := readEnvFD()
	if err != nil {
		return setupFailed(errnoOf(err), "%v", err)
	}
	j.control = slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, ControlSocketEnv+"=") })
	t, err := takeTrees(j)
	if err != nil {
		return setupFailed(errnoOf(err), "preparing the jail: %v", err)
	}
	err = t.build(j)
	t.close()
	if err != nil {
		return setupFailed(errnoOf(err), "building the jail: %v", err)
	}
	if err := confineThread(); err != nil {
		return setupFailed(errnoOf(err), "confining the run: %v", err)
	}
	// Keep SIGTERM and friends from ending the init before the program:
	// the server's cancel signals the whole group, and the program gets
	// its grace; a SIGKILL from the server still ends both at once.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	pid, err := startJailed(j, env)
	if err != nil {
		return setupFailed(errnoOf(err), "%s", whyNotStart(j, err))
	}
	os.NewFile(setupFD, "setup").Close() // the program runs: nothing to report
	return reapUntil(pid)
}

// startJailed forks and execs the program from this thread: as the run's
// uid, gid and supplementary groups (set in the child, before the
// working directory is entered, so that the directory is entered as the
// user), with stdio only and the run's environment.
func startJailed(j *jailSpec, env []string) (int, error) {
	prog := jailProgram(j)
	return syscall.ForkExec(prog, append([]string{prog}, j.ProgArgs...), &syscall.ProcAttr{
		Dir: j.Cwd, Env: env, Files: []uintptr{0, 1, 2},
		Sys: &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: j.Uid, Gid: j.Gid, Groups: append([]uint32{}, j.Groups...)}},
	})
}

// jailProgram is the program's path inside the jail.
func jailProgram(j *jailSpec) string { return path.Join(j.MountRoot, "agent", j.ProgName) }

// whyNotStart names what failed when the program could not be started: a
// fork reports the errno of its chdir and of its exec alike, so the
// working directory is looked at first (as root: what root cannot enter,
// the user cannot either).
func whyNotStart(j *jailSpec, err error) string {
	if st, serr := os.Stat(j.Cwd); serr != nil || !st.IsDir() {
		return fmt.Sprintf("cannot enter the run's working directory %s in the chroot: %v", j.Cwd, err)
	}
	return whyNotExec(jailProgram(j), err)
}

// reapUntil reaps every child until pid ends, and returns pid's exit
// status (128+N for a death by signal N, as a shell says it: the init of
// a PID namespace cannot die by a signal it sends itself).
func reapUntil(pid int) int {
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return 127
		case got != pid:
			continue // an orphan the run left; the namespace's end takes the rest
		case ws.Signaled():
			return 128 + int(ws.Signal())
		default:
			return ws.ExitStatus()
		}
	}
}

// trees are the detached copies a jail is built from.
type trees struct {
	root, session, program int // session is -1 without one
	control, self          int // the control socket and this binary, -1 without a control socket
	devices                []int
}

// takeTrees clones, in the host's namespace, every tree the jail shows.
func takeTrees(j *jailSpec) (*trees, error) {
	t := &trees{session: -1, control: -1, self: -1}
	var err error
	if j.control {
		if err := t.takeControl(); err != nil {
			return nil, err
		}
	}
	if t.root, err = cloneTree(jailRootFD, "", jailAttrs); err != nil {
		return nil, fmt.Errorf("the agent's root/: %w", err)
	}
	if j.SessionDir != "" {
		if t.session, err = cloneSession(j); err != nil {
			return nil, fmt.Errorf("the session directory %s: %w", j.SessionDir, err)
		}
	}
	if t.program, err = cloneTree(unix.AT_FDCWD, j.ProgHost, jailAttrs|unix.MOUNT_ATTR_RDONLY); err != nil {
		return nil, fmt.Errorf("the program %s: %w", j.ProgHost, err)
	}
	for _, d := range jailDevices {
		fd, err := cloneTree(unix.AT_FDCWD, "/dev/"+d, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC)
		if err != nil {
			return nil, fmt.Errorf("/dev/%s: %w", d, err)
		}
		t.devices = append(t.devices, fd)
	}
	return t, nil
}

// takeControl clones the run's control socket (controlFD: the server
// hands one exactly when the run's environment names it) and this very
// binary.
func (t *trees) takeControl() error {
	var err error
	if t.control, err = cloneTree(controlFD, "", jailAttrs|unix.MOUNT_ATTR_NOEXEC); err != nil {
		return fmt.Errorf("the control socket: %w", err)
	}
	unix.Close(controlFD)
	if t.self, err = cloneTree(unix.AT_FDCWD, "/proc/self/exe", jailAttrs|unix.MOUNT_ATTR_RDONLY); err != nil {
		return fmt.Errorf("the ctxfs binary: %w", err)
	}
	return nil
}

// cloneSession clones the session directory from the mount: its path
// below the mount root has only names the server allows (no user can
// put a symlink there), and it is resolved so anyway. home/ and shared/
// are mounts of their own below the mount root: the walk crosses onto
// one of them and onto no other mount below it. A mount there is a
// user's own (a member of a shared space may mount a FUSE filesystem of
// theirs over a session directory the group may write), and cloned it
// would show another member's run that user's filesystem as its session
// (EXDEV instead).
func cloneSession(j *jailSpec) (int, error) {
	mnt, err := unix.Open(j.MountRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(mnt)
	top, below, _ := strings.Cut(rel(j.SessionDir, j.MountRoot), "/")
	how := beneath
	how.Resolve &^= unix.RESOLVE_NO_XDEV
	topFd, err := unix.Openat2(mnt, top, &how)
	if err != nil {
		return -1, err
	}
	defer unix.Close(topFd)
	fd, err := unix.Openat2(topFd, below, &beneath)
	if err != nil {
		return -1, err
	}
	defer unix.Close(fd)
	return cloneTree(fd, "", jailAttrs)
}

// cloneTree makes a detached copy of the mount at dirfd/name (a bind
// mount not attached anywhere yet) with attrs set on it.
func cloneTree(dirfd int, name string, attrs uint64) (int, error) {
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC)
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	fd, err := unix.OpenTree(dirfd, name, flags)
	if err != nil {
		return -1, fmt.Errorf("open_tree: %w", err)
	}
	if attrs != 0 {
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: attrs}); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("mount_setattr: %w", err)
		}
	}
	return fd, nil
}

// build enters a new mount namespace, private from the start so that no
// mount made here reaches the host, attaches the trees, and pivots into
// the root.
func (t *trees) build(j *jailSpec) error {
	// After unshare the working directory is the new namespace's copy of
	// root/; the root tree is attached over it.
	if err := unix.Fchdir(jailRootFD); err != nil {
		return err
	}
	if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	if err := unix.Mount("none", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	if err := unix.MoveMount(t.root, "", unix.AT_FDCWD, ".", unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attaching root/: %w", err)
	}
	if err := t.buildCtx(j); err != nil {
		return err
	}
	if err := t.buildDev(); err != nil {
		return err
	}
	if err := t.buildProc(); err != nil {
		return err
	}
	return pivotInto(t.root)
}

// pivotInto makes the tree at root this namespace's root and detaches
// the old one, with every host mount under it (the FUSE mounts too): the
// namespace then holds only the jail, so /proc/PID/root of a jailed
// process shows the jail and its ".." stays there, and no mount of the
// host is pinned by a run. (runc's pivotRoot: pivot_root(".", ".") stacks
// the old root on the new one, and a lazy unmount of "." takes it away.)
func pivotInto(root int) error {
	oldRoot, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(oldRoot)
	if err := unix.Fchdir(root); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Fchdir(oldRoot); err != nil {
		return err
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the host's root: %w", err)
	}
	return unix.Chdir("/")
}

// close closes the trees' descriptors: attached or not, the jail no
// longer needs them, and the program must inherit none.
func (t *trees) close() {
	for _, fd := range append([]int{t.root, t.session, t.program, t.control, t.self, jailRootFD}, t.devices...) {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// buildCtx mounts the read-only tmpfs at the mount root's path that shows
// the run's own session, its home and its program.
func (t *trees) buildCtx(j *jailSpec) error {
	dirs := []string{rel(j.Home, j.MountRoot), "agent"}
	if j.SessionDir != "" {
		dirs = append(dirs, rel(j.SessionDir, j.MountRoot))
	}
	binds := map[string]int{"agent/" + j.ProgName: t.program}
	if t.control >= 0 {
		binds[rel(JailControl(j.MountRoot), j.MountRoot)] = t.control
		binds[rel(JailCtxfs(j.MountRoot), j.MountRoot)] = t.self
	}
	tmp, err := t.tmpfsAt(strings.TrimPrefix(j.MountRoot, "/"), dirs, binds)
	if err != nil {
		return fmt.Errorf("%s in the jail: %w", j.MountRoot, err)
	}
	if j.SessionDir != "" {
		if err := attachAt(t.session, tmp, rel(j.SessionDir, j.MountRoot)); err != nil {
			return fmt.Errorf("binding the session: %w", err)
		}
	}
	return readOnly(tmp)
}

// buildDev mounts the jail's /dev: a read-only tmpfs with the host's
// harmless devices bound in.
func (t *trees) buildDev() error {
	binds := map[string]int{}
	for i, d := range jailDevices {
		binds[d] = t.devices[i]
	}
	tmp, err := t.tmpfsAt("dev", nil, binds)
	if err != nil {
		return fmt.Errorf("/dev in the jail: %w", err)
	}
	return readOnly(tmp)
}

// tmpfsAt attaches a small new tmpfs at the mountpoint mp inside the root
// tree, makes dirs in it, and binds each tree of binds onto a new file of
// its name. It returns the tmpfs's descriptor.
func (t *trees) tmpfsAt(mp string, dirs []string, binds map[string]int) (int, error) {
	tmp, err := newTmpfs()
	if err != nil {
		return -1, err
	}
	if err := t.attachBeneath(tmp, mp); err != nil {
		return -1, err
	}
	for _, d := range dirs {
		if err := mkdirAllAt(tmp, d); err != nil {
			return -1, err
		}
	}
	for name, tree := range binds {
		if err := mkdirAllAt(tmp, path.Dir(name)); err != nil {
			return -1, err
		}
		f, err := unix.Openat(tmp, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o755)
		if err != nil {
			return -1, err
		}
		unix.Close(f)
		if err := attachAt(tree, tmp, name); err != nil {
			return -1, fmt.Errorf("binding %s: %w", name, err)
		}
	}
	return tmp, nil
}

// attachBeneath attaches the detached tree onto the mountpoint mp inside
// the root tree, a directory of the user's tree: opened without following
// a symlink (ELOOP), as a directory (a file there is ENOTDIR), beneath the
// root and on its mount, and attached by that descriptor. A name the user
// swaps meanwhile is never resolved again; at worst the tree lands on a
// directory the user moved elsewhere in root/, inside the jail all the same.
func (t *trees) attachBeneath(tree int, mp string) error {
	target, err := unix.Openat2(t.root, mp, &beneath)
	if err != nil {
		return fmt.Errorf("mountpoint %s in root/: %w", mp, err)
	}
	defer unix.Close(target)
	if err := unix.MoveMount(tree, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount onto %s: %w", mp, err)
	}
	return nil
}

// buildProc mounts the jail's /proc: a new procfs made by this process,
// the init of the run's PID namespace, so it shows that namespace's
// processes only (1 is this init; the program and its children), and
// /proc/self/exe, /proc/self/root, /proc/self/fd mean the jail's. It is
// read-only as a whole, so no write reaches the kernel's settings
// (/proc/sys, /proc/sysrq-trigger …) whatever the run's uid (root's own
// runs are uid 0 without capabilities, which file modes alone would let
// write there); nosuid, nodev and noexec like every tree of the jail.
// The jailed program can neither remount it nor mount another (no
// capability, and the seccomp filter refuses every mount call).
func (t *trees) buildProc() error {
	fs, err := unix.Fsopen("proc", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("fsopen proc: %w", err)
	}
	defer unix.Close(fs)
	if err := unix.FsconfigCreate(fs); err != nil {
		return fmt.Errorf("proc: %w", err)
	}
	proc, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return fmt.Errorf("fsmount proc: %w", err)
	}
	defer unix.Close(proc)
	if err := t.attachBeneath(proc, "proc"); err != nil {
		return fmt.Errorf("/proc in the jail: %w", err)
	}
	return nil
}

// newTmpfs makes a detached tmpfs, small and without set-user-id or
// device files of its own (bound devices keep their own mounts' flags).
func newTmpfs() (int, error) {
	fs, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen tmpfs: %w", err)
	}
	defer unix.Close(fs)
	for k, v := range map[string]string{"mode": "0755", "size": "64k", "nr_inodes": "256"} {
		if err := unix.FsconfigSetString(fs, k, v); err != nil {
			return -1, fmt.Errorf("tmpfs %s=%s: %w", k, v, err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1, fmt.Errorf("tmpfs: %w", err)
	}
	fd, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsmount tmpfs: %w", err)
	}
	return fd, nil
}

// attachAt attaches the detached tree at dir/name (inside a tmpfs this
// process made, where nobody else can change a name).
func attachAt(tree, dir int, name string) error {
	return unix.MoveMount(tree, "", dir, name, unix.MOVE_MOUNT_F_EMPTY_PATH)
}

func readOnly(fd int) error {
	return unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY})
}

// mkdirAllAt makes rel and its parents under dir, 0755.
func mkdirAllAt(dir int, rel string) error {
	p := ""
	for _, c := range strings.Split(rel, "/") {
		if c == "" || c == "." {
			continue
		}
		p = path.Join(p, c)
		if err := unix.Mkdirat(dir, p, 0o755); err != nil && err != unix.EEXIST {
			return fmt.Errorf("mkdir %s: %w", p, err)
		}
	}
	return nil
}

// confineThread prepares this thread so that the program it forks can
// never gain a privilege: no_new_privs, an empty capability bounding set
// (even a uid 0 program then execs with no capability), no ambient or
// inheritable capability, and the jail's seccomp filter, loaded last. The
// child changes its ids itself (startJailed). All of it is per thread and
// inherited by a child of this thread only.
func confineThread() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	for c := 0; ; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			if err == unix.EINVAL && c > 0 { // past the last capability this kernel knows
				break
			}
			return fmt.Errorf("dropping capability %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clearing ambient capabilities: %w", err)
	}
	if err := clearInheritable(); err != nil {
		return err
	}
	return loadJailFilter()
}

// clearInheritable empties this thread's inheritable capabilities, which
// a uid 0 program would otherwise keep across exec.
func clearInheritable() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// whyNotExec names what is missing when the program cannot be executed
// in its jail: ENOENT from exec of a file that exists means its
// interpreter (#!) or its dynamic loader is not in root/.
func whyNotExec(prog string, err error) string {
	if !errors.Is(err, syscall.ENOENT) {
		return fmt.Sprintf("cannot execute %s in the chroot: %v", prog, err)
	}
	head := make([]byte, 256)
	if f, oerr := os.Open(prog); oerr == nil {
		n, _ := f.Read(head)
		head = head[:n]
		if interp := elfInterpreter(f); interp != "" {
			f.Close()
			return fmt.Sprintf("the agent's root/ has no %s, the dynamic loader %s needs", interp, prog)
		}
		f.Close()
	}
	if rest, ok := bytes.CutPrefix(head, []byte("#!")); ok {
		line, _, _ := bytes.Cut(rest, []byte("\n"))
		if fields := strings.Fields(string(line)); len(fields) > 0 {
			return fmt.Sprintf("the agent's root/ has no %s, the interpreter %s names", fields[0], prog)
		}
	}
	return fmt.Sprintf("cannot execute %s in the chroot: %v", prog, err)
}

// elfInterpreter is the PT_INTERP of an ELF file, or "".
func elfInterpreter(f *os.File) string {
	ef, err := elf.NewFile(f)
	if err != nil {
		return ""
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err == nil {
				return strings.TrimRight(string(b), "\x00")
			}
		}
	}
	return ""
}

// errnoOf is err's errno, EIO when it carries none.
func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}
