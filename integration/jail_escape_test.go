package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// The jail escape tests (issue 19, findings 2, 3, 4 and 6) run the static
// probe testdata/jailprobe as a chroot-isolated agent of uid escapeUser and
// look at it from inside (its report) and from outside (/proc as that uid).

// escapeUser owns the probed runs and the host process they try to reach.
var escapeUser = &cred{uid: 1001, gid: 1001, groups: []uint32{1001}}

// probeAgent is the name of the probe's agent definition, and so the
// probe's command name in /proc.
const probeAgent = "probe"

// newProbeServer starts a server whose agent probeAgent runs the probe in
// a chroot, with extra definition files.
func newProbeServer(t *testing.T, extra map[string]string) *server {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "jailprobe")
	build := exec.Command("go", "build", "-o", bin, "./testdata/jailprobe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the probe: %v\n%s", err, out)
	}
	probe, err := os.ReadFile(bin)
	testkit.Must(t, err)
	files := map[string]string{"isolation": "chroot", "abi": "text", "program": string(probe)}
	for k, v := range extra {
		files[k] = v
	}
	return newFuseServerWith(t, func(s *server) { s.define(probeAgent, files) })
}

// probeReport is the probe's report of one run as escapeUser.
func (s *server) probeReport(t *testing.T, session, input string) map[string]any {
	t.Helper()
	frames, raw, err := s.requestAs(escapeUser, probeAgent, fmt.Sprintf(`{"op":"send","id":"r-%s","session":%q,"input":%q}`, session, session, input))
	if err != nil || errorCode(frames) != "" {
		t.Fatalf("probe run: %v %v\n%s\nlog:\n%s", err, frames, raw, s.logText())
	}
	text := deltaText(frames)
	var report map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(text)), &report); err != nil {
		t.Fatalf("the probe's report %q: %v", text, err)
	}
	return report
}

// holdProbe starts a probe run that stays until the test ends (then it is
// cancelled), and returns the probe's host pid.
func (s *server) holdProbe(t *testing.T, session string) int {
	t.Helper()
	id := "hold-" + session
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.requestAs(escapeUser, probeAgent, fmt.Sprintf(`{"op":"send","id":%q,"session":%q,"input":"0 hold"}`, id, session))
	}()
	t.Cleanup(func() {
		s.requestAs(escapeUser, probeAgent, fmt.Sprintf(`{"op":"cancel","id":%q}`, id))
		<-done
	})
	var pid int
	eventually(t, 15*time.Second, "the held probe", func() bool {
		pid = descendantNamed(s.cmd.Process.Pid, probeAgent)
		return pid > 0
	})
	return pid
}

// descendantNamed is the pid of a live process named name below ancestor
// (in any generation), 0 when there is none.
func descendantNamed(ancestor int, name string) int {
	for _, pid := range hostPids() {
		if procField(pid, "Name") != name {
			continue
		}
		for p := procParent(pid); p > 1; p = procParent(p) {
			if p == ancestor {
				return pid
			}
		}
	}
	return 0
}

// hostPids are the pids of every process /proc shows now.
func hostPids() []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

func procField(pid int, key string) string {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ""
	}
	return statusField(string(st), key)
}

func procParent(pid int) int {
	ppid, _ := strconv.Atoi(procField(pid, "PPid"))
	return ppid
}

// startHostSleep starts `sleep 600` as c outside any jail, killed when the
// test ends, and returns its pid.
func startHostSleep(t *testing.T, c *cred) int {
	cmd := exec.Command("/bin/sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: c.uid, Gid: c.gid, Groups: c.groups}}
	testkit.Must(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd.Process.Pid
}

// TestJailHidesHostProcesses: a jailed program is the second process of a
// PID namespace of its own (its init is the first, and nothing else is
// there: the scan sees 1 and itself); a process of its own uid outside is not found by kill(pid, 0),
// not attached by ptrace, not written by process_vm_writev; it can make
// no user namespace and no mount.
func TestJailHidesHostProcesses(t *testing.T) {
	s := newProbeServer(t, nil)
	host := startHostSleep(t, escapeUser)
	r := s.probeReport(t, "procs", strconv.Itoa(host))
	want := map[string]string{"kill": "ESRCH", "process_vm_writev": "EPERM", "unshare_user": "EPERM", "mount": "EPERM"}
	for k, v := range want {
		if r[k] != v {
			t.Errorf("%s from the jail: %v, want %s (report %v)", k, r[k], v, r)
		}
	}
	if r["ptrace"] != "EPERM" && r["ptrace"] != "ESRCH" {
		t.Errorf("PTRACE_ATTACH from the jail: %v, want EPERM or ESRCH", r["ptrace"])
	}
	// Its init's threads take the pids between.
	if self := fmt.Sprint(r["getpid"]); self == "1" || fmt.Sprint(r["pids"]) != "[1 "+self+"]" {
		t.Errorf("the jail's program is pid %v and sees the processes %v, want only its init (1) and itself", r["getpid"], r["pids"])
	}
	if tracer := procField(host, "TracerPid"); tracer != "0" {
		t.Errorf("the host process is traced by %s", tracer)
	}
	if st := procField(host, "State"); !strings.HasPrefix(st, "S") {
		t.Errorf("the host process is %q, want sleeping", st)
	}
}

// TestJailProcRootStaysInside: from outside, as the run's uid,
// /proc/PID/root of a jailed program is the jail, and its ".." is the
// jail's root again: never the store (no session, no .seal).
func TestJailProcRootStaysInside(t *testing.T) {
	s := newProbeServer(t, nil)
	pid := s.holdProbe(t, "held")
	list := func(p string) string {
		out, err := runCmd(t, escapeUser, nil, "ls", "-a", p)
		if err != nil {
			t.Fatalf("ls %s as uid %d: %v\n%s", p, escapeUser.uid, err, out)
		}
		return out
	}
	root := fmt.Sprintf("/proc/%d/root", pid)
	inside, above := list(root+"/"), list(root+"/..")
	if above != inside {
		t.Errorf("%s/.. lists\n%s\nnot the jail's root\n%s", root, above, inside)
	}
	for _, leak := range []string{"session", ".seal", "root"} {
		for _, name := range strings.Fields(above) {
			if name == leak {
				t.Errorf("%s/.. shows %q: the store leaks into the jail's /proc view:\n%s", root, leak, above)
			}
		}
	}
	if !strings.Contains(inside, "dev") {
		t.Errorf("%s is not the jail's root:\n%s", root, inside)
	}
}

// TestJailEnvNotForRoot: a definition's env (LD_PRELOAD included) never
// reaches the jail's trampoline, which runs as root: it starts with no
// environment at all and nothing of the run's in its argv, and the
// library's constructor never runs as root. The program still gets the
// whole environment.
func TestJailEnvNotForRoot(t *testing.T) {
	marks := t.TempDir()
	testkit.Must(t, os.Chmod(marks, 0o777))
	lib := buildMarkerLib(t, marks)
	s := newProbeServer(t, map[string]string{"env": "LD_PRELOAD=" + lib + "\nPROBE_MARK=env-reached\n"})
	prog := s.holdProbe(t, "env")
	init := procParent(prog)
	if env := fileBytes(t, fmt.Sprintf("/proc/%d/environ", init)); env != "" {
		t.Errorf("the jail's trampoline (pid %d, uid %s) has an environment: %q", init, procField(init, "Uid"), envNames(env))
	}
	if args := fileBytes(t, fmt.Sprintf("/proc/%d/cmdline", init)); strings.Contains(args, "env-reached") || strings.Contains(args, lib) {
		t.Errorf("the trampoline's argv holds the run's environment: %q", args)
	}
	env := strings.Split(fileBytes(t, fmt.Sprintf("/proc/%d/environ", prog)), "\x00")
	for _, w := range []string{"PROBE_MARK=env-reached", "LD_PRELOAD=" + lib} {
		if !contains(env, w) {
			t.Errorf("the program's environment lacks %q: %q", w, env)
		}
	}
	if !hasPrefixIn(env, "CTX_SESSION_DIR=") {
		t.Errorf("the program's environment lacks CTX_SESSION_DIR: %q", env)
	}
	if _, err := os.Stat(filepath.Join(marks, "marker.0")); err == nil {
		t.Errorf("the definition's LD_PRELOAD ran as root")
	}
}

// buildMarkerLib compiles a shared library whose constructor creates
// dir/marker.EUID, and returns its path.
func buildMarkerLib(t *testing.T, dir string) string {
	t.Helper()
	src := filepath.Join(dir, "marker.c")
	lib := filepath.Join(dir, "marker.so")
	testkit.Must(t, os.WriteFile(src, []byte(`#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void mark(void) {
	char p[4096];
	snprintf(p, sizeof p, "%s/marker.%d", MARKDIR, (int)geteuid());
	FILE *f = fopen(p, "w");
	if (f) fclose(f);
}
`), 0o644))
	if out, err := exec.Command("cc", "-shared", "-fPIC", fmt.Sprintf(`-DMARKDIR="%s"`, dir), "-o", lib, src).CombinedOutput(); err != nil {
		t.Skipf("no C compiler to build the LD_PRELOAD library: %v\n%s", err, out)
	}
	openToAll(t, lib)
	return lib
}

// envNames are the names of an environ file's variables (their values
// may be anyone's secrets: a test log shows no value).
func envNames(environ string) []string {
	var names []string
	for _, e := range strings.Split(environ, "\x00") {
		if k, _, ok := strings.Cut(e, "="); ok {
			names = append(names, k)
		}
	}
	return names
}

func contains(list []string, w string) bool {
	for _, l := range list {
		if l == w {
			return true
		}
	}
	return false
}

func hasPrefixIn(list []string, prefix string) bool {
	for _, l := range list {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

// TestJailSetsidLeftoverEnds: a process a jailed run left behind in a
// session of its own ends with the run (its PID namespace ends with its
// init), and `ctxfs umount` then stops the server at once.
func TestJailSetsidLeftoverEnds(t *testing.T) {
	s := newFuseServerWith(t, func(s *server) {
		s.define("leftover", map[string]string{"isolation": "chroot", "abi": "text",
			"program": "#!/bin/sh\nsetsid sleep 1317 &\necho started\n"})
	})
	if _, err := os.Stat(busybox); err != nil {
		t.Skipf("%s is missing", busybox)
	}
	s.jailBusybox(t, escapeUser.uid, "leftover")
	frames, raw, err := s.requestAs(escapeUser, "leftover", `{"op":"send","id":"l1","session":"left","input":"x"}`)
	if err != nil || frames[len(frames)-1]["status"] != "ok" {
		t.Fatalf("the run: %v %v\n%s\nlog:\n%s", err, frames, raw, s.logText())
	}
	leftover := []byte("sleep\x001317\x00")
	t.Cleanup(func() { killByCmdline(leftover) })
	eventually(t, 5*time.Second, "the setsid leftover gone", func() bool { return len(pidsByCmdline(leftover)) == 0 })
	if out, code := ctxfsCmd(t, "umount", "--root", s.root); code != 0 {
		t.Fatalf("ctxfs umount after a jailed run: exit %d\n%s\nlog:\n%s", code, out, s.logText())
	}
}

// pidsByCmdline are the live processes whose argv is exactly cmdline.
func pidsByCmdline(cmdline []byte) []int {
	var pids []int
	for _, pid := range hostPids() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && bytes.Equal(b, cmdline) && !strings.HasPrefix(procField(pid, "State"), "Z") {
			pids = append(pids, pid)
		}
	}
	return pids
}

func killByCmdline(cmdline []byte) {
	for _, pid := range pidsByCmdline(cmdline) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}
