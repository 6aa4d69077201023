package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// busybox is the static userland the jail tests put in an agent's root/.
const busybox = "/bin/busybox"

// jailUser is the uid the jailed runs belong to.
var jailUser = &cred{uid: 1000, gid: 1000}

// newJailServer starts a server with the agent "jailed" (isolation chroot,
// abi text, the given program) and, once its mounts are up, prepares as root
// through the mount uid 1000's root/ for it with busybox in bin/ (SPEC 2:
// root may create another uid's home).
func newJailServer(t *testing.T, program string, withShell bool) *server {
	t.Helper()
	requireFUSE(t)
	if _, err := os.Stat(busybox); err != nil {
		if os.Getenv("CTXFS_REQUIRE_FUSE") != "" {
			t.Fatalf("%s is missing (apt-get install busybox-static)", busybox)
		}
		t.Skipf("%s is missing", busybox)
	}
	s := newFuseServerWith(t, func(s *server) {
		s.define("jailed", map[string]string{"isolation": "chroot", "abi": "text", "program": program})
	})
	if withShell {
		s.jailBusybox(t, jailUser.uid, "jailed")
	}
	return s
}

// jailBusybox puts busybox and its applets in an agent's root/bin,
// through the mount as root.
func (s *server) jailBusybox(t *testing.T, uid uint32, agent string) {
	bin := s.mnt(fmt.Sprintf("home/%d/agent/%s/root/bin", uid, agent))
	testkit.Must(t, os.MkdirAll(bin, 0o755))
	data, err := os.ReadFile(busybox)
	testkit.Must(t, err)
	testkit.Must(t, os.WriteFile(filepath.Join(bin, "busybox"), data, 0o755))
	for _, a := range []string{"sh", "cat", "ls", "id", "echo", "sleep", "ln", "test", "head", "pwd", "true", "tr", "grep", "setsid"} {
		testkit.Must(t, os.Symlink("busybox", filepath.Join(bin, a)))
	}
}

// jailSend sends input to the jailed agent as uid 1000 and returns the
// frames and the streamed text.
func (s *server) jailSend(t *testing.T, session, id, input string) ([]frame, string) {
	t.Helper()
	frames, raw, err := s.requestAs(jailUser, "jailed", fmt.Sprintf(`{"op":"send","id":%q,"session":%q,"input":%q}`, id, session, input))
	if err != nil {
		t.Fatalf("send: %v\n%s\nlog:\n%s", err, raw, s.logText())
	}
	return frames, deltaText(frames)
}

// mountTable is this process's mount table as s's jails could change it:
// without the mount ids, which say nothing about what is mounted where,
// and without the mounts of other tests' temporary directories (the
// servers of test processes running beside this one come and go there).
func (s *server) mountTable(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	testkit.Must(t, err)
	ours := filepath.Dir(s.root) + "/"
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) <= 4 || otherTestMount(f[4], ours) {
			continue
		}
		out = append(out, strings.Join(f[3:], " "))
	}
	return strings.Join(out, "\n")
}

// otherTestMount reports whether a mount at dir belongs to another test:
// it is in the temporary directory, outside ours, or it is a network
// namespace's (/run/netns, which the first `ip netns add` mounts, and its
// entries): the cluster and distributed-filesystem tests make them, in
// another test process at the same time (scripts/test-integration.sh),
// and a jail makes none.
func otherTestMount(dir, ours string) bool {
	if dir == "/run/netns" || strings.HasPrefix(dir, "/run/netns/") {
		return true
	}
	return strings.HasPrefix(dir, os.TempDir()+"/") && !strings.HasPrefix(dir+"/", ours)
}

// jailProbe runs inside the jail: it reports what it sees, one "key: value"
// line each.
const jailProbe = `#!/bin/sh
echo "uid: $(id -u) gid: $(id -g) groups: $(id -G)"
echo "cwd: $(pwd)"
echo "root: $(ls / | tr '\n' ' ')"
echo "ctx: $(ls $CTX_HOME/.. | tr '\n' ' ')"
echo "sessions: $(ls $CTX_SESSION_DIR/.. | tr '\n' ' ')"
echo "input: $(cat $CTX_SESSION_DIR/messages.jsonl | grep -c probe-input)"
cat /etc/hostname >/dev/null 2>&1 && echo "hostname: visible"
test -e "$STORE_PATH" && echo "store: visible"
cd /.. && echo "dotdot: $(pwd)"
ln -s /etc/hostname /escape 2>/dev/null; cat /escape >/dev/null 2>&1 && echo "symlink: escaped"
exit 0
`

// TestJailShowsOnlyItsOwnSession: a chroot-isolated program runs as the
// session's uid with no groups and no capabilities, in root/, sees its own
// session at its mount path, and nothing else of /ctx or the host.
func TestJailShowsOnlyItsOwnSession(t *testing.T) {
	s := newJailServer(t, jailProbe, true)
	probe := strings.ReplaceAll(jailProbe, "$STORE_PATH", s.store)
	s.define("jailed", map[string]string{"program": probe})
	s.jailSend(t, "other", "o1", "another session")
	frames, text := s.jailSend(t, "mine", "m1", "probe-input")
	if code := errorCode(frames); code != "" || frames[len(frames)-1]["status"] != "ok" {
		t.Fatalf("run failed: %v\ntext:\n%s", frames, text)
	}
	for _, w := range []string{"uid: 1000 gid: 1000 groups: 1000\n", "cwd: /\n", "input: 1\n", "dotdot: /\n"} {
		if !strings.Contains(text, w) {
			t.Errorf("missing %q in:\n%s", w, text)
		}
	}
	// Its /proc shows only the jail: TestJailProcShowsOnlyTheJail.
	for _, bad := range []string{"hostname: visible", "store: visible", "symlink: escaped"} {
		if strings.Contains(text, bad) {
			t.Errorf("the jail shows too much: %q in:\n%s", bad, text)
		}
	}
	if !strings.Contains(text, "ctx: 1000 \n") {
		t.Errorf("the jail's /ctx/home should hold only uid 1000:\n%s", text)
	}
	if !strings.Contains(text, "sessions: mine \n") {
		t.Errorf("the jail should show only its own session:\n%s", text)
	}
}

// TestJailCancelLeavesNothing: a running jailed program has no capability,
// no supplementary group, no_new_privs and only stdio open; it mounts
// nothing the host sees; a cancel by client id alone (SPEC 7) leaves no
// process and no mount.
func TestJailCancelLeavesNothing(t *testing.T) {
	s := newJailServer(t, "#!/bin/sh\nexec sleep 60\n", true)
	before := s.mountTable(t)
	done := make(chan []frame, 1)
	go func() {
		frames, _, _ := s.requestAs(jailUser, "jailed", `{"op":"send","id":"w1","session":"w","input":"wait"}`)
		done <- frames
	}()
	var pid int
	eventually(t, 15*time.Second, "the jailed program", func() bool {
		pid = descendantNamed(s.cmd.Process.Pid, "sleep") // the jail's init's child

		return pid > 0
	})
	status := fileBytes(t, fmt.Sprintf("/proc/%d/status", pid))
	for _, w := range []string{"CapInh:\t0000000000000000", "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000",
		"CapBnd:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1", "Uid:\t1000\t1000\t1000\t1000", "Gid:\t1000\t1000\t1000\t1000"} {
		if !strings.Contains(status, w) {
			t.Errorf("/proc/%d/status lacks %q", pid, w)
		}
	}
	if groups := statusField(status, "Groups"); groups != "" {
		t.Errorf("the jailed program has groups %q, want none", groups)
	}
	if links := openFiles(t, pid); len(links) != 3 {
		t.Errorf("the jailed program holds %v, want stdio only", links)
	}
	for _, l := range strings.Split(fileBytes(t, fmt.Sprintf("/proc/%d/mountinfo", pid)), "\n") {
		if f := strings.Fields(l); len(f) > 5 && !strings.Contains(f[5], "nosuid") {
			t.Errorf("a jail mount lacks nosuid: %s", l)
		}
	}
	if got := s.mountTable(t); got != before {
		t.Errorf("the host's mount table changed while a jail runs")
	}
	if f, _, err := s.requestAs(jailUser, "jailed", `{"op":"cancel","id":"w1"}`); err != nil || len(f) != 1 || f[0]["cancelled"] != true {
		t.Fatalf("cancel: %v %v", f, err)
	}
	select {
	case frames := <-done:
		if last := frames[len(frames)-1]; last["type"] != "done" || last["status"] != "cancelled" {
			t.Fatalf("want done cancelled, got %v", frames)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the cancelled run did not end")
	}
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Errorf("the jailed program %d still runs after the cancel (%v)", pid, err)
	}
	if got := s.mountTable(t); got != before {
		t.Errorf("the host's mount table changed after a cancelled jail")
	}
}

// statusField is the value of a /proc/PID/status field, trimmed.
func statusField(status, key string) string {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// openFiles lists a process's descriptors as "fd=target".
func openFiles(t *testing.T, pid int) []string {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	testkit.Must(t, err)
	var links []string
	for _, fd := range fds {
		l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		links = append(links, fd.Name()+"="+l)
	}
	return links
}

// TestJailLeaksNoMounts: 50 jailed runs leave the host's mount table as
// it was, and root/ holds only the empty mountpoints it needed.
func TestJailLeaksNoMounts(t *testing.T) {
	s := newJailServer(t, "#!/bin/sh\necho ok\n", true)
	before := s.mountTable(t)
	for i := 0; i < 50; i++ {
		frames, text := s.jailSend(t, "many", fmt.Sprintf("n%d", i), "x")
		if text != "ok\n" || frames[len(frames)-1]["status"] != "ok" {
			t.Fatalf("run %d: %q %v\nlog:\n%s", i, text, frames, s.logText())
		}
	}
	if got := s.mountTable(t); got != before {
		t.Fatalf("the host's mount table changed after 50 jailed runs:\nbefore:\n%s\nafter:\n%s", before, got)
	}
	root := s.mnt("home/1000/agent/jailed/root")
	for _, mp := range []string{"dev", strings.TrimPrefix(s.root, "/")} {
		ents, err := os.ReadDir(filepath.Join(root, mp))
		if err != nil || len(ents) != 0 {
			t.Errorf("mountpoint %s in root/: %v %v, want an empty directory", mp, ents, err)
		}
	}
}

// TestJailMissingInterpreter: a root/ without the program's interpreter
// fails the run with ENOENT naming it, at once.
func TestJailMissingInterpreter(t *testing.T) {
	s := newJailServer(t, "#!/bin/sh\necho never\n", false)
	testkit.Must(t, os.MkdirAll(s.mnt("home/1000/agent/jailed/root"), 0o755))
	frames, text := s.jailSend(t, "bare", "b1", "x")
	last := frames[len(frames)-1]
	if errorCode(frames) != "ENOENT" || last["status"] != "error" || text != "" {
		t.Fatalf("want ENOENT and done error, got %v", frames)
	}
	if msg := errorMessage(frames); !strings.Contains(msg, "/bin/sh") {
		t.Errorf("the error should name /bin/sh: %q", msg)
	}
}

// TestJailMissingLoaderAndLibrary: a dynamic program in a root/ without
// its loader fails with ENOENT naming the loader; with the loader but not
// its libraries, ENOENT naming the library the loader could not find.
func TestJailMissingLoaderAndLibrary(t *testing.T) {
	prog, err := os.ReadFile("/bin/true") // dynamic, needs ld-linux and libc
	testkit.Must(t, err)
	s := newJailServer(t, string(prog), false)
	root := s.mnt("home/1000/agent/jailed/root")
	testkit.Must(t, os.MkdirAll(root, 0o755))
	frames, _ := s.jailSend(t, "noloader", "n1", "x")
	if errorCode(frames) != "ENOENT" || !strings.Contains(errorMessage(frames), "ld-linux") {
		t.Fatalf("without a loader: want ENOENT naming ld-linux, got %v", frames)
	}
	loader, err := os.ReadFile("/lib64/ld-linux-x86-64.so.2")
	testkit.Must(t, err)
	testkit.Must(t, os.MkdirAll(filepath.Join(root, "lib64"), 0o755))
	testkit.Must(t, os.WriteFile(filepath.Join(root, "lib64", "ld-linux-x86-64.so.2"), loader, 0o755))
	frames, _ = s.jailSend(t, "nolibc", "n2", "x")
	if errorCode(frames) != "ENOENT" || !strings.Contains(errorMessage(frames), "libc.so.6") {
		t.Fatalf("without libc: want ENOENT naming libc.so.6, got %v", frames)
	}
}

// TestJailRefusesPlantedLinks: a mountpoint the jail needs that the user
// made a symlink (root/dev -> /etc, root/<mount root> -> /etc) fails the
// run; nothing is mounted on the link's target, on the host or inside.
func TestJailRefusesPlantedLinks(t *testing.T) {
	s := newJailServer(t, "#!/bin/sh\necho ran\n", true)
	root := s.mnt("home/1000/agent/jailed/root")
	for i, name := range []string{"dev", strings.Split(strings.TrimPrefix(s.root, "/"), "/")[0]} {
		t.Run(name, func(t *testing.T) {
			before := s.mountTable(t)
			link := filepath.Join(root, name)
			os.RemoveAll(link)
			testkit.Must(t, os.Symlink("/etc", link))
			defer os.Remove(link)
			frames, text := s.jailSend(t, "links", fmt.Sprintf("l%d", i), "x")
			if last := frames[len(frames)-1]; last["status"] != "error" || text != "" {
				t.Fatalf("a jail through a planted link ran: %v", frames)
			}
			if got := s.mountTable(t); got != before {
				t.Fatalf("the host's mount table changed")
			}
		})
	}
}

// TestRootCreatesAnotherUidsHome: root's mkdir -p through the mount makes
// uid 1000's home on the spot, owned by 1000; another uid may not.
func TestRootCreatesAnotherUidsHome(t *testing.T) {
	s := newFuseServer(t)
	home := s.mnt("home/1000")
	testkit.Must(t, os.MkdirAll(filepath.Join(home, "agent/coder/root/bin"), 0o755))
	for _, d := range []string{"", "agent", "agent/coder", "agent/coder/root", "agent/coder/session"} {
		st, err := os.Stat(filepath.Join(home, d))
		testkit.Must(t, err)
		if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 1000 || st.Mode().Perm() != 0o700 {
			t.Errorf("home/1000/%s: uid %d mode %v, want 1000 and 0700", d, sys.Uid, st.Mode().Perm())
		}
	}
	err := os.Mkdir(home, 0o700)
	testkit.WantErrno(t, "mkdir of an existing home", err, syscall.EEXIST)
	out, err := bashAs(t, &cred{uid: 1001, gid: 1001}, "mkdir "+s.mnt("home/1002"))
	if err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("uid 1001 made uid 1002's home: %v %s", err, out)
	}
	if _, err := os.Stat(s.mnt("home/1002")); !os.IsNotExist(err) {
		t.Errorf("home/1002 exists after a refused mkdir: %v", err)
	}
}

// TestCancelByClientIDAcrossSessions: a cancel naming a client id and no
// session stops the newest running run with that id in any of the caller's
// sessions of the agent; with a session it looks only there (SPEC 7).
func TestCancelByClientIDAcrossSessions(t *testing.T) {
	requireFUSE(t)
	s := newServerWith(t, func(s *server) {
		s.define("sleeper", map[string]string{"abi": "text", "program": "#!/bin/sh\nexec sleep 60\n"})
	})
	ends := map[string]chan []frame{}
	runOf := map[string]string{}
	for _, sess := range []string{"older", "newer", "other"} {
		ends[sess] = make(chan []frame, 1)
		go func(sess string) {
			frames, _ := s.request("sleeper", fmt.Sprintf(`{"op":"send","id":"dup","session":%q,"input":"x"}`, sess))
			ends[sess] <- frames
		}(sess)
		eventually(t, 10*time.Second, sess+" running", func() bool {
			st := s.mustRequest("sleeper", fmt.Sprintf(`{"op":"status","session":%q}`, sess))
			runs, _ := st[0]["runs"].([]any)
			if len(runs) == 1 && runs[0].(map[string]any)["phase"] == "running" {
				runOf[sess] = runs[0].(map[string]any)["run"].(string)
				return true
			}
			return false
		})
	}
	cancel := func(line, wantRun, sess string) {
		t.Helper()
		f := s.mustRequest("sleeper", line)
		if len(f) != 1 || f[0]["cancelled"] != true || f[0]["run"] != wantRun {
			t.Fatalf("%s: %v, want %s cancelled", line, f, wantRun)
		}
		select {
		case frames := <-ends[sess]:
			if last := frames[len(frames)-1]; last["status"] != "cancelled" {
				t.Fatalf("%s: %v", sess, frames)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("%s did not end", sess)
		}
	}
	cancel(`{"op":"cancel","id":"dup","session":"older"}`, runOf["older"], "older")
	cancel(`{"op":"cancel","id":"dup"}`, runOf["other"], "other")
	cancel(`{"op":"cancel","id":"dup"}`, runOf["newer"], "newer")
	if f := s.mustRequest("sleeper", `{"op":"cancel","id":"dup"}`); f[0]["cancelled"] != false || f[0]["stale"] != true {
		t.Fatalf("a cancel with nothing running: %v", f)
	}
}
