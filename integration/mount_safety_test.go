package integration

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/mountlife"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// ctxfsCmd runs the ctxfs binary with a deadline and returns its combined
// output and exit code.
func ctxfsCmd(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctxfsBin, args...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("ctxfs %v: timed out\n%s", args, out)
	}
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// umountLeftovers makes sure no mount of root outlives the test.
func umountLeftovers(t *testing.T, root string) {
	t.Cleanup(func() {
		for _, d := range []string{"home", "shared"} {
			exec.Command("umount", "-l", filepath.Join(root, d)).Run()
		}
	})
}

// A second `ctxfs mount` on a root that a live server serves, with another
// store or the same one, in the background or the foreground, is refused
// before anything is forked or touched; the first server still serves. So
// is a mount of its store at another root.
func TestDoubleMountRefused(t *testing.T) {
	s := newFuseServer(t)
	s.send("d", "c0", "before")
	pid := s.cmd.Process.Pid
	other := filepath.Join(filepath.Dir(s.root), "other-store")
	otherRoot := filepath.Join(filepath.Dir(s.root), "other-root")
	umountLeftovers(t, otherRoot)
	want := fmt.Sprintf("ctxfs: %s is served by pid %d (store %s); ctxfs umount --root %s first\n", s.root, pid, s.store, s.root)
	wantStore := fmt.Sprintf("ctxfs: store %s is served by pid %d (root %s); ctxfs umount --root %s first\n", s.store, pid, s.root, s.root)
	cases := []struct {
		name, root, store, want string
	}{
		{"other store", s.root, other, want},
		{"same store", s.root, s.store, want},
		{"same store, other root", otherRoot, s.store, wantStore},
	}
	for i, c := range cases {
		for _, mode := range [][]string{nil, {"--foreground"}} {
			start := time.Now()
			out, code := ctxfsCmd(t, append([]string{"mount", "--root", c.root, "--store", c.store}, mode...)...)
			took := time.Since(start)
			if code != 1 || out != c.want {
				t.Errorf("%s %v: exit %d, output %q; want exit 1, %q", c.name, mode, code, out, c.want)
			}
			t.Logf("%s %v: refused in %v", c.name, mode, took.Round(time.Millisecond))
			if _, err := os.Stat(other); !os.IsNotExist(err) {
				t.Errorf("%s %v: the refused mount made its store (%v)", c.name, mode, err)
			}
			// The first server is untouched: its two mounts, its answers.
			for _, d := range []string{"home", "shared"} {
				if n := mountsAt(s.mnt(d)); n != 1 {
					t.Errorf("%s %v: %d mounts at %s, want 1", c.name, mode, n, d)
				}
			}
			input := fmt.Sprintf("after refused mount %d%d", i, len(mode))
			s.send("d", fmt.Sprintf("c%d%d", i, len(mode)), input)
			if got := s.readMnt(sessRel("d") + "/messages.jsonl"); !strings.Contains(got, input) {
				t.Errorf("%s %v: the first mount does not show the send %q", c.name, mode, input)
			}
			if mountsAt(filepath.Join(otherRoot, "home")) != 0 {
				t.Errorf("%s %v: the refused mount mounted %s", c.name, mode, otherRoot)
			}
		}
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the first server is gone: %v", err)
	}
}

// `ctxfs umount` signals nothing but the root's live server. After a
// kill -9 its pid file may name a pid that an unrelated process got since;
// and a process may even hold the file's lock while the file names it.
// Neither is signalled.
func TestUmountSparesUnrelatedProcess(t *testing.T) {
	s := newFuseServer(t)
	keepFusectlAsIs(t)
	wd := watchdogOf(s.cmd.Process.Pid)
	reaped(t, s.crash())
	if _, gone := timeGone(wd, time.Now(), 5*time.Second); wd == 0 || !gone {
		t.Fatalf("the watchdog (pid %d) of the killed server is not gone", wd)
	}
	// It cleaned up behind the server: no mount, no pid file.
	pidPath := filepath.Join(s.root, "agent", ".ctxfs.pid")
	if mountsAt(s.mnt("home"))+mountsAt(s.mnt("shared")) != 0 {
		t.Errorf("the dead server's mounts are still there")
	}
	if _, err := os.Stat(pidPath); !os.IsNotExist(err) {
		t.Errorf("the dead server's pid file is still there (%v)", err)
	}

	// A pid file left behind, naming a live unrelated process.
	sleeper := startProc(t, "sleep", "60")
	testkit.Must(t, os.WriteFile(pidPath, []byte(fmt.Sprintf("%d\n%s\n", sleeper.Process.Pid, s.store)), 0o600))
	out, code := ctxfsCmd(t, "umount", "--root", s.root)
	if code != 1 || out != "ctxfs: umount: "+s.root+": not mounted\n" {
		t.Errorf("umount with a stale pid file: exit %d, %q", code, out)
	}
	wantAlive(t, sleeper, "the process a stale pid file names")

	// A process that holds the pid file's lock and is named in it, but is
	// not a ctxfs server.
	locker := startProc(t, "/usr/bin/python3", "-c", `
import fcntl, os, sys, time
f = open(sys.argv[1], "r+")
f.truncate(0); f.write("%d\n/x\n" % os.getpid()); f.flush()
fcntl.lockf(f, fcntl.LOCK_EX, 1, 0)
print("locked", flush=True)
time.sleep(60)
`, pidPath)
	waitLine(t, locker, "locked")
	out, code = ctxfsCmd(t, "umount", "--root", s.root)
	if code == 0 || !strings.Contains(out, "not signalling anything") {
		t.Errorf("umount with a pid file locked by a non-server: exit %d, %q", code, out)
	}
	wantAlive(t, locker, "a non-server that holds the pid file's lock")
	// A mount does not take the root from it either.
	out, code = ctxfsCmd(t, "mount", "--foreground", "--root", s.root, "--store", s.store)
	if code != 1 || !strings.Contains(out, fmt.Sprintf("pid %d", locker.Process.Pid)) {
		t.Errorf("mount with the pid file locked by another process: exit %d, %q", code, out)
	}
	wantAlive(t, locker, "a non-server that holds the pid file's lock")
}

// proc is a helper process that startProc started.
type proc struct {
	*exec.Cmd
	lines chan string // its stdout, line by line
}

// startProc starts a helper process in its own process group, killed at
// cleanup, with its stdout kept for waitLine.
func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{Cmd: exec.Command(name, args...), lines: make(chan string, 16)}
	startAs(t, p, nil)
	return p
}

// startAs starts p as c (nil: as the test, root), as startProc does.
func startAs(t *testing.T, p *proc, c *cred) {
	t.Helper()
	p.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if c != nil {
		p.SysProcAttr.Credential = &syscall.Credential{Uid: c.uid, Gid: c.gid, Groups: c.groups}
	}
	out, err := p.StdoutPipe()
	testkit.Must(t, err)
	testkit.Must(t, p.Start())
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
		p.Wait()
	})
}

// waitLine waits for a line of a startProc process's output.
func waitLine(t *testing.T, p *proc, want string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("%v ended before printing %q", p.Args, want)
			}
			if l == want {
				return
			}
		case <-deadline:
			t.Fatalf("%v did not print %q", p.Args, want)
		}
	}
}

// wantAlive fails the test when pid was signalled (it is gone or a zombie).
func wantAlive(t *testing.T, p *proc, what string) {
	t.Helper()
	if !processLives(p.Process.Pid) {
		t.Errorf("%s (pid %d) was killed", what, p.Process.Pid)
	}
}

// processLives reports whether pid exists and one of its threads is not a
// zombie: a killed process whose first thread exited while another is
// stuck in the kernel still lives.
func processLives(pid int) bool {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			continue
		}
		_, rest, _ := strings.Cut(string(b), ") ")
		if !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X") {
			return true
		}
	}
	return false
}

// watchdogOf finds the watchdog process of server pid (0 when none).
func watchdogOf(pid int) int {
	// The server answers its sockets before its mounts and their watchdog
	// are up: give it a moment.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if wd := findWatchdog(pid); wd != 0 || time.Now().After(deadline) || !processLives(pid) {
			return wd
		}
	}
}

// findWatchdog looks once for the watchdog of server pid.
func findWatchdog(pid int) int {
	ds, _ := os.ReadDir("/proc")
	for _, d := range ds {
		var p int
		if _, err := fmt.Sscanf(d.Name(), "%d", &p); err != nil {
			continue
		}
		b, _ := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		args := strings.Split(string(b), "\x00")
		if len(args) > 3 && args[1] == "watchdog" && args[2] == "--server" && args[3] == fmt.Sprint(pid) {
			return p
		}
	}
	return 0
}

// timeGone waits (up to limit) until pid is gone or a zombie, and returns
// how long that took from start.
func timeGone(pid int, start time.Time, limit time.Duration) (time.Duration, bool) {
	for time.Since(start) < limit {
		if !processLives(pid) {
			return time.Since(start), true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start), false
}

// A server stuck in the kernel after kill -9 (hangfs: a thread waits for a
// page that an unanswered READ holds) cannot end, nor can its connection;
// its watchdog aborts the connection at once, which frees the reader and
// the server, and detaches the mount. Without a watchdog (the control) the
// same kill leaves both hanging, which shows the case is the real one.
func TestWatchdogFreesAStuckServer(t *testing.T) {
	requireFUSE(t)
	keepFusectlAsIs(t)
	hangfs := buildHangfs(t)
	control := stuckKill(t, hangfs, "-")
	if control.freed {
		t.Fatalf("control without a watchdog: the killed server was freed (%v); the case does not reproduce", control.server)
	}
	t.Logf("control without a watchdog: server and reader still blocked after %v", control.server)
	got := stuckKill(t, hangfs, ctxfsBin)
	if !got.freed || got.server > 2*time.Second || got.reader > 2*time.Second {
		t.Fatalf("with the watchdog: server gone after %v, reader after %v (freed %v)", got.server, got.reader, got.freed)
	}
	if got.mounted {
		t.Errorf("the dead mount is still there")
	}
	if got.watchdogLeft {
		t.Errorf("the watchdog is still running")
	}
	t.Logf("with the watchdog: the killed server was gone after %v, its blocked reader after %v",
		got.server.Round(time.Millisecond), got.reader.Round(time.Millisecond))
}

// stuckResult is what stuckKill measured after the SIGKILL.
type stuckResult struct {
	server, reader time.Duration // time until each was gone
	freed          bool          // both gone within the limit
	mounted        bool          // the mount was still there
	watchdogLeft   bool
}

// stuckKill mounts hangfs (with watchdog: the ctxfs binary, or "-"), gets
// a reader and the server stuck, kills the server with SIGKILL and
// measures; any leftover is aborted and detached before it returns.
func stuckKill(t *testing.T, hangfs, watchdog string) stuckResult {
	dir := filepath.Join(t.TempDir(), "mnt")
	testkit.Must(t, os.Mkdir(dir, 0o755))
	srv := startProc(t, hangfs, dir, watchdog)
	t.Cleanup(func() { mountlife.AbortDead(dir); exec.Command("umount", "-l", dir).Run() })
	waitLine(t, srv, "ready")
	wd := watchdogOf(srv.Process.Pid)
	reader := startProc(t, "cat", filepath.Join(dir, "f"))
	waitLine(t, srv, "notifying")
	time.Sleep(300 * time.Millisecond) // the invalidation now waits on the page
	start := time.Now()
	syscall.Kill(srv.Process.Pid, syscall.SIGKILL)
	syscall.Kill(reader.Process.Pid, syscall.SIGKILL)
	var r stuckResult
	var ok1, ok2 bool
	r.server, ok1 = timeGone(srv.Process.Pid, start, 3*time.Second)
	r.reader, ok2 = timeGone(reader.Process.Pid, start, 3*time.Second)
	r.freed = ok1 && ok2
	r.mounted = mountsAt(dir) > 0
	if wd != 0 {
		_, gone := timeGone(wd, start, 3*time.Second)
		r.watchdogLeft = !gone
	}
	mountlife.AbortDead(dir) // the control's leftovers
	exec.Command("umount", "-l", dir).Run()
	return r
}

// deadWithoutWatchdog is a server killed while its watchdog cannot act
// (stopped, and killed when the test ends): a dead server whose mounts
// stay behind. The server dies only once every thread of the watchdog has
// stopped: kill(SIGSTOP) returns before, and a thread that was not the one
// woken for it ran on. Its read of stdin returned at the server's death
// (the pipe's end closed), and it aborted and detached the dead mounts
// before its stop came (a perf trace of umount2 showed the watchdog's
// thread detaching them): the mounts were gone before clean-stale ran, in
// 2 of 16 runs beside stress-ng --cpu 2 --io 1 (0 of 20 since it waits).
func deadWithoutWatchdog(t *testing.T) *server {
	dead := newFuseServer(t)
	umountLeftovers(t, dead.root)
	wd := watchdogOf(dead.cmd.Process.Pid)
	if wd == 0 {
		t.Fatalf("server %d has no watchdog", dead.cmd.Process.Pid)
	}
	t.Cleanup(func() { syscall.Kill(wd, syscall.SIGKILL); syscall.Kill(wd, syscall.SIGCONT) })
	testkit.Must(t, pause(wd))
	reaped(t, dead.crash())
	return dead
}

// `ctxfs clean-stale` (what CI runs before the tests) cleans a dead ctxfs
// mount and nothing else: not a live server's mounts, not another
// filesystem's dead FUSE mount.
func TestCleanStaleOnlyDeadCtxfs(t *testing.T) {
	requireFUSE(t)
	// clean-stale mounts fusectl where it is not (abortConn), so the test
	// starts without it when it can, and otherwise runs with it mounted.
	// It used to wait up to 10 s for the unmount, and failed whenever
	// another process held fusectl that long: stress-ng's io stressor
	// (in TestStressNGFreeTree's filesystem class, run by the other test
	// process of a CI run) keeps every mount open to syncfs it; 5 of 5
	// runs beside stress-ng --io 1 failed so. The unmount had been put in
	// because the dead mounts were seen gone when fusectl was mounted:
	// that was the watchdog acting before its stop (deadWithoutWatchdog).
	if mountsAt(fusectlDir) > 0 && exec.Command("umount", fusectlDir).Run() == nil {
		t.Cleanup(func() { exec.Command("mount", "-t", "fusectl", "none", fusectlDir).Run() })
	}
	keepFusectlAsIs(t)
	base := t.TempDir()
	live := newFuseServer(t)
	dead := deadWithoutWatchdog(t)
	other := filepath.Join(base, "other")
	testkit.Must(t, os.Mkdir(other, 0o755))
	hangfs := buildHangfs(t)
	h := startProc(t, hangfs, other, "-")
	t.Cleanup(func() { exec.Command("umount", "-l", other).Run() })
	waitLine(t, h, "ready")
	syscall.Kill(h.Process.Pid, syscall.SIGKILL)
	h.Wait()

	if mountsAt(dead.mnt("home")) != 1 || mountsAt(dead.mnt("shared")) != 1 {
		t.Fatalf("the dead server's mounts are gone before clean-stale runs: something outside this test cleaned them")
	}
	for _, under := range []string{filepath.Dir(live.root), filepath.Dir(dead.root), base} {
		out, code := ctxfsCmd(t, "clean-stale", "--under", under)
		lines := strings.Fields(out)
		sort.Strings(lines)
		want := ""
		if under == filepath.Dir(dead.root) {
			want = strings.Join([]string{dead.mnt("home"), dead.mnt("shared")}, " ")
		}
		if got := strings.Join(slices.DeleteFunc(lines, func(w string) bool { return !filepath.IsAbs(w) }), " "); code != 0 || got != want {
			t.Errorf("clean-stale --under %s: exit %d, %q; want the dead mounts %q", under, code, out, want)
		}
	}
	for _, d := range []string{"home", "shared"} {
		if n := mountsAt(dead.mnt(d)); n != 0 {
			t.Errorf("the dead server's %s: %d mounts left", d, n)
		}
		if n := mountsAt(live.mnt(d)); n != 1 {
			t.Errorf("the live server's %s: %d mounts, want 1", d, n)
		}
	}
	if mountsAt(other) != 1 {
		t.Errorf("the dead non-ctxfs FUSE mount was touched")
	}
	live.send("c", "c1", "still served")
}

// buildHangfs builds testdata/hangfs (see there).
func buildHangfs(t *testing.T) string {
	t.Helper()
	hangfs := filepath.Join(t.TempDir(), "hangfs")
	if out, err := goBuild(hangfs, "./testdata/hangfs").CombinedOutput(); err != nil {
		t.Fatalf("build hangfs: %v\n%s", err, out)
	}
	return hangfs
}

// A live FUSE mount at the root that no ctxfs server holds (another
// filesystem, or a server whose pid file was removed) is never mounted
// over nor detached: the mount is refused, the other filesystem stays.
func TestMountRefusesForeignLiveMount(t *testing.T) {
	requireFUSE(t)
	base := t.TempDir()
	root, store := filepath.Join(base, "ctx"), filepath.Join(base, "store")
	home := filepath.Join(root, "home")
	testkit.Must(t, os.MkdirAll(home, 0o755))
	umountLeftovers(t, root)
	h := startProc(t, buildHangfs(t), home, "-")
	waitLine(t, h, "ready")
	want := fmt.Sprintf("ctxfs: %s is mounted by a live FUSE server that does not hold %s; unmount it first\n", home, filepath.Join(root, "agent", ".ctxfs.pid"))
	for _, mode := range [][]string{nil, {"--foreground"}} {
		out, code := ctxfsCmd(t, append([]string{"mount", "--root", root, "--store", store}, mode...)...)
		if code != 1 || out != want {
			t.Errorf("mount %v over a live foreign mount: exit %d, %q; want %q", mode, code, out, want)
		}
		if n := mountsAt(home); n != 1 || !processLives(h.Process.Pid) {
			t.Fatalf("mount %v: the foreign mount was touched (%d mounts, its server alive %v)", mode, n, processLives(h.Process.Pid))
		}
		if _, err := os.Stat(filepath.Join(home, "f")); err != nil {
			t.Errorf("mount %v: the foreign mount no longer answers: %v", mode, err)
		}
	}
	out, code := ctxfsCmd(t, "umount", "--root", root)
	if code != 1 || !strings.Contains(out, "left alone") || mountsAt(home) != 1 {
		t.Errorf("umount of a root with a live foreign mount: exit %d, %q, %d mounts", code, out, mountsAt(home))
	}
}
