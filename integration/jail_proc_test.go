package integration

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// The jail's /proc (agent.Jail): a procfs of the run's own PID namespace,
// read-only, mounted only onto a real directory root/proc.

// procProbe runs in the jail and reports what its /proc shows, one
// "key: value" line each. The pids are globbed by the shell itself, so
// that no other process of the probe's is listed.
const procProbe = `#!/bin/sh
echo "me: $$"
echo "pids:" /proc/[0-9]*
echo "ls: $(ls /proc | grep '^[0-9]' | tr '\n' ' ')"
echo "init: $(tr '\0' ' ' </proc/1/cmdline | head -c 200)"
echo "self-root: $(busybox readlink /proc/self/root)"
echo "self-root-ls: $(ls /proc/self/root/ | tr '\n' ' ')"
echo "root-ls: $(ls / | tr '\n' ' ')"
echo "exe: $(busybox readlink /proc/self/exe)"
echo "init-root: $(ls /proc/1/root/ 2>&1)"
h=$(cat /proc/sys/kernel/hostname)
echo "sysctl: $( (echo "$h" >/proc/sys/kernel/hostname) 2>&1)"
echo "remount: $(busybox mount -o remount,rw /proc 2>&1; echo $?)"
echo "mount: $(busybox mount -t proc proc /tmp 2>&1; echo $?)"
echo "mounts: $(grep ' /proc ' /proc/self/mounts)"
exit 0
`

// probeLine is the value of "key: " in a probe's output.
func probeLine(text, key string) string {
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, key+": "); ok {
			return v
		}
	}
	return ""
}

// TestJailProcShowsOnlyTheJail: a jailed program (uid 1000, and root's own
// run, uid 0 without capabilities) has a /proc; it lists the jail's init
// (1) and the program only, never a host process; /proc/self/root is the
// jail's root; /proc/1/root (the init is root's) cannot be listed; /proc/sys cannot be written
// (the mount is read-only: EROFS, whatever the uid) and /proc can be
// neither remounted nor mounted again. The host's mount table is as
// before. root/proc, which root/ lacked, is made owned by the uid.
func TestJailProcShowsOnlyTheJail(t *testing.T) {
	s := newJailServer(t, procProbe, true)
	s.jailBusybox(t, 0, "jailed")
	hostname := strings.TrimSpace(fileBytes(t, "/proc/sys/kernel/hostname"))
	before := s.mountTable(t)
	for _, c := range []*cred{jailUser, {uid: 0, gid: 0}} {
		t.Run(fmt.Sprint(c.uid), func(t *testing.T) {
			frames, raw, err := s.requestAs(c, "jailed", `{"op":"send","id":"p1","session":"proc","input":"x"}`)
			text := deltaText(frames)
			if err != nil || frames[len(frames)-1]["status"] != "ok" {
				t.Fatalf("run: %v %v\n%s\nlog:\n%s", err, frames, raw, s.logText())
			}
			me := probeLine(text, "me")
			if got, want := probeLine(text, "pids"), "/proc/1 /proc/"+me; got != want {
				t.Errorf("the jail's /proc lists %q, want only its init and the program %q:\n%s", got, want, text)
			}
			for _, pid := range strings.Fields(probeLine(text, "ls")) {
				if pid != "1" && pid != me && !isChildOf(text, pid) {
					t.Errorf("ls /proc in the jail shows pid %s, not the jail's:\n%s", pid, text)
				}
			}
			if init := probeLine(text, "init"); !strings.Contains(init, " __jail ") {
				t.Errorf("/proc/1 is %q, not the jail's init", init)
			}
			if got := probeLine(text, "self-root"); got != "/" {
				t.Errorf("/proc/self/root is %q, want /", got)
			}
			if a, b := probeLine(text, "self-root-ls"), probeLine(text, "root-ls"); a != b || !strings.Contains(a, "proc") {
				t.Errorf("/proc/self/root lists %q, / lists %q", a, b)
			}
			if got := probeLine(text, "exe"); got != "/bin/busybox" {
				t.Errorf("/proc/self/exe is %q, want /bin/busybox", got)
			}
			if got := probeLine(text, "init-root"); !strings.Contains(got, "ermission denied") {
				t.Errorf("ls /proc/1/root/ (the init is root's): %q, want permission denied", got)
			}
			if got := probeLine(text, "sysctl"); !strings.Contains(got, "Read-only file system") {
				t.Errorf("a write to /proc/sys/kernel/hostname: %q, want EROFS", got)
			}
			for _, k := range []string{"remount", "mount"} {
				if got := probeLine(text, k); strings.HasSuffix(got, " 0") || got == "0" {
					t.Errorf("%s of /proc from the jail succeeded: %q", k, got)
				}
			}
			if m := strings.Fields(probeLine(text, "mounts")); len(m) < 4 || m[2] != "proc" || !hasOpts(m[3], "ro", "nosuid", "nodev", "noexec") {
				t.Errorf("the jail's /proc mount is %q, want proc ro,nosuid,nodev,noexec", m)
			}
			// made as the other mountpoints are: the uid's, 0700 (the
			// procfs mounted on it has its own modes)
			wantOwnerMode(t, s.mnt(fmt.Sprintf("home/%d/agent/jailed/root/proc", c.uid)), c.uid, 0o700)
		})
	}
	if got := strings.TrimSpace(fileBytes(t, "/proc/sys/kernel/hostname")); got != hostname {
		t.Errorf("the host's hostname changed from %q to %q", hostname, got)
	}
	if got := s.mountTable(t); got != before {
		t.Errorf("the host's mount table changed:\nbefore:\n%s\nafter:\n%s", before, got)
	}
}

// isChildOf reports whether pid is one the probe's own commands may have
// had when ls ran (the subshell's ls, grep and tr): a pid above the
// probe's own.
func isChildOf(text, pid string) bool {
	var me, p int
	fmt.Sscan(probeLine(text, "me"), &me)
	_, err := fmt.Sscan(pid, &p)
	return err == nil && p > me
}

// hasOpts reports whether the comma-separated options hold every one of want.
func hasOpts(opts string, want ...string) bool {
	have := strings.Split(opts, ",")
	for _, w := range want {
		if !contains(have, w) {
			return false
		}
	}
	return true
}

// etcNames is /etc's own entry and its names, with their inode numbers and
// change times: what a mount on it, or a write through a link to it, would
// change.
func etcNames(t *testing.T) string {
	var b strings.Builder
	ents, err := os.ReadDir("/etc")
	testkit.Must(t, err)
	for _, e := range append([]string{"."}, names(ents)...) {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join("/etc", e), &st); err == nil {
			fmt.Fprintf(&b, "%s %d %d %d.%d\n", e, st.Dev, st.Ino, st.Ctim.Sec, st.Ctim.Nsec)
		}
	}
	return b.String()
}

func names(ents []os.DirEntry) []string {
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestJailProcNotThroughALink: a root/proc the user made a symlink to
// /etc, or a regular file, is neither followed nor mounted over: the run
// fails (EIO, "root/proc: not a directory"), before anything runs; the host's /etc
// and mount table are as before, and the link and the file are left as
// they were.
func TestJailProcNotThroughALink(t *testing.T) {
	s := newJailServer(t, "#!/bin/sh\necho ran\n", true)
	root := s.mnt("home/1000/agent/jailed/root")
	plant := map[string]string{"symlink": "ln -s /etc " + root + "/proc", "file": "echo mine >" + root + "/proc"}
	for i, kind := range []string{"symlink", "file"} {
		t.Run(kind, func(t *testing.T) {
			if out, err := bashAs(t, jailUser, "rm -rf "+root+"/proc && "+plant[kind]); err != nil {
				t.Fatalf("planting root/proc: %v\n%s", err, out)
			}
			planted := withoutAtimes(hostSnapshot(t, filepath.Join(s.store, "home/1000/agent/jailed/root/proc")))
			etc, mounts := etcNames(t), s.mountTable(t)
			frames, text := s.jailSend(t, "links", fmt.Sprintf("l%d", i), "x")
			// The store's door refuses it, as for every mountpoint: EIO
			// naming root/proc "not a directory".
			if last := frames[len(frames)-1]; last["status"] != "error" || text != "" || errorCode(frames) != "EIO" ||
				!strings.HasSuffix(errorMessage(frames), "/root/proc: not a directory") {
				t.Fatalf("a jail with root/proc a %s: %v", kind, frames)
			}
			if etcNames(t) != etc {
				t.Errorf("/etc changed")
			}
			if s.mountTable(t) != mounts {
				t.Errorf("the host's mount table changed")
			}
			testkit.Same(t, "root/proc", planted, withoutAtimes(hostSnapshot(t, filepath.Join(s.store, "home/1000/agent/jailed/root/proc"))))
		})
	}
}

// TestJailProcRaced: the jail's own check, when root/proc becomes a
// symlink or a file after the server made the mountpoints and before the
// trampoline mounts /proc (the user's tree changes under the server at
// any time): the trampoline itself, given a root/ whose proc is a link to
// /etc, fails ELOOP naming the mountpoint, and with proc a file ENOTDIR;
// nothing is mounted on /etc.
func TestJailProcRaced(t *testing.T) {
	requireFUSE(t)
	for kind, want := range map[string]unix.Errno{"symlink": unix.ELOOP, "file": unix.ENOTDIR} {
		t.Run(kind, func(t *testing.T) {
			root := t.TempDir()
			testkit.Must(t, os.Chmod(root, 0o755))
			for _, d := range []string{"dev", "ctx", "bin"} {
				testkit.Must(t, os.Mkdir(filepath.Join(root, d), 0o755))
			}
			if kind == "symlink" {
				testkit.Must(t, os.Symlink("/etc", filepath.Join(root, "proc")))
			} else {
				testkit.Must(t, os.WriteFile(filepath.Join(root, "proc"), []byte("mine\n"), 0o644))
			}
			etc := etcNames(t)
			code, report := runTrampoline(t, root)
			if code != 127 || !strings.HasPrefix(report, fmt.Sprintf("%d ", want)) || !strings.Contains(report, "mountpoint proc in root/") {
				t.Errorf("the jail with root/proc a %s: exit %d, report %q; want %d (%v) naming proc", kind, code, report, want, want)
			}
			if etcNames(t) != etc {
				t.Errorf("/etc changed")
			}
		})
	}
}

// runTrampoline runs `ctxfs __jail` as the server does (agent.jailAttr:
// its own process group and PID namespace) for uid 1000 with root as its
// root/, the program busybox's true, and returns its exit status and what
// it reported on the setup pipe.
func runTrampoline(t *testing.T, root string) (int, string) {
	t.Helper()
	dir, err := os.Open(root)
	testkit.Must(t, err)
	defer dir.Close()
	setupR, setupW, err := os.Pipe()
	testkit.Must(t, err)
	defer setupR.Close()
	env, err := os.CreateTemp(t.TempDir(), "env")
	testkit.Must(t, err)
	defer env.Close()
	cmd := exec.Command(ctxfsBin, "__jail", "1000", "1000", "", "/ctx", "", "/ctx/home/1000", "/", "probe", busybox)
	cmd.Env = []string{}
	cmd.ExtraFiles = []*os.File{setupW, env, dir} // descriptors 3, 4 and 5
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true, Cloneflags: unix.CLONE_NEWPID, Pdeathsig: unix.SIGKILL}
	testkit.Must(t, cmd.Start())
	setupW.Close()
	report, _ := io.ReadAll(io.LimitReader(setupR, 4096))
	cmd.Wait()
	return cmd.ProcessState.ExitCode(), string(report)
}
