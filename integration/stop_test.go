package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/mountinfo"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// demoHint is the last line `make run` prints before it serves until
// Ctrl+C (scripts/demo.sh).
const demoHint = "Ctrl+C stops the server and unmounts."

// `make run`, as a person runs it, then Ctrl+C: the demo (scripts/demo.sh
// with the binaries under test, as make run runs it after make build) in
// an interactive bash on a terminal, piped through tee or not. Meanwhile,
// from another shell, the person does what the demo suggests: sends
// another message and follows the session's events with `tail -f`, which
// keeps the home mount busy. Ctrl+C goes to the whole job (the terminal
// signals its process group: tee dies first, then the server, whose
// output is that pipe, logs its stop). The demo must exit 0, leave no
// mount under its root and no server, and the log tee wrote must hold
// everything the demo printed.
//
// Before the fix, piped: the server died of SIGPIPE at its "stopping" log
// line and its watchdog of SIGPIPE while reporting its cleanup, so both
// mounts were left dead (ENOTCONN); not piped: the busy home mount failed
// to unmount (EBUSY) and was left dead when the server exited.
func TestStopDemoOnCtrlC(t *testing.T) {
	for _, piped := range []bool{true, false} {
		t.Run(fmt.Sprintf("piped=%v", piped), func(t *testing.T) { testStopDemo(t, piped) })
	}
}

func testStopDemo(t *testing.T, piped bool) {
	requireFUSE(t)
	base := t.TempDir()
	os.Chmod(base, 0o755)
	root, store := filepath.Join(base, "ctx"), filepath.Join(base, "store")
	demo := demoCheckout(t, base)
	t.Cleanup(func() { stopRoot(t, root) }) // whatever the test left running
	sh := startShell(t, nil)
	line := fmt.Sprintf("%s %s %s", demo, root, store)
	teeLog := filepath.Join(base, "log")
	if piped {
		line += " 2>&1 | tee " + teeLog
	}
	sh.keys(line + "\n")
	sh.expect(demoHint)

	env := []string{"CTX_ROOT=" + root}
	if out, err := runCmd(t, nil, env, ctxBin, "agent", "send", "demo", "another message"); err != nil {
		t.Fatalf("ctx agent send demo: %v\n%s", err, out)
	}
	events := filepath.Join(root, "home/0/agent/demo/session/default/events.jsonl")
	tail := exec.Command("tail", "-f", events)
	tailOut, err := os.Create(filepath.Join(base, "tail.out"))
	testkit.Must(t, err)
	defer tailOut.Close()
	tail.Stdout, tail.Stderr = tailOut, tailOut
	testkit.Must(t, tail.Start())
	tailDone := make(chan struct{})
	go func() { tail.Wait(); close(tailDone) }()
	t.Cleanup(func() { tail.Process.Kill(); <-tailDone })
	eventually(t, 10*time.Second, "tail -f shows the second reply", func() bool {
		return strings.Contains(fileBytes(t, tailOut.Name()), "another message")
	})

	sh.keys("\x03")
	sh.keys("echo \"status=${PIPESTATUS[*]}.\"\n")
	want := "status=0."
	if piped {
		want = "status=0 130." // tee dies of the SIGINT
	}
	sh.expect(want)

	if left := mountsUnder(root); len(left) > 0 {
		t.Errorf("mounts left under %s after Ctrl+C: %v\nterminal:\n%s", root, left, sh.output())
	}
	if out, code := ctxfsCmd(t, "umount", "--root", root); code != 1 || !strings.Contains(out, "not mounted") {
		t.Errorf("ctxfs umount after the demo stopped: exit %d, %q; want 1, not mounted (no server, nothing to clean)", code, out)
	}
	if piped {
		b, err := os.ReadFile(teeLog)
		testkit.Must(t, err)
		for _, want := range []string{"$ ctx agent send demo 'hello from ctxfs'", "hello from ctxfs", "messages.jsonl", demoHint} {
			if !strings.Contains(string(b), want) {
				t.Errorf("tee's log has no %q:\n%s", want, b)
			}
		}
	} else if !strings.Contains(sh.output(), "msg=stopped") {
		t.Errorf("the server's stop is not on the terminal:\n%s", sh.output())
	}
}

// demoCheckout lays out scripts/demo.sh and bin/ under base as a checkout
// after make build has them (the script runs ../bin/ctxfs), with the
// binaries under test, and returns the script's path.
func demoCheckout(t *testing.T, base string) string {
	t.Helper()
	dir := filepath.Join(base, "checkout")
	for _, d := range []string{"scripts", "bin"} {
		testkit.Must(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	script, err := os.ReadFile("../scripts/demo.sh")
	testkit.Must(t, err)
	demo := filepath.Join(dir, "scripts", "demo.sh")
	testkit.Must(t, os.WriteFile(demo, script, 0o755))
	testkit.Must(t, os.Symlink(ctxfsBin, filepath.Join(dir, "bin", "ctxfs")))
	testkit.Must(t, os.Symlink(ctxBin, filepath.Join(dir, "bin", "ctx")))
	return demo
}

// startShell starts an interactive bash on a terminal, as a person's, with
// env added to a plain environment. Its jobs have their own process
// groups: a Ctrl+C typed into the terminal signals the foreground job.
func startShell(t *testing.T, env []string) *ptyChat {
	t.Helper()
	// SIGINT and SIGQUIT as a terminal's shell has them: the test binary
	// may have them ignored (an asynchronous command of a shell without
	// job control), and a shell and the programs it runs keep that, so
	// tee, piped from the demo, outlived its Ctrl+C and exited 0.
	cmd := exec.Command("/usr/bin/env", "--default-signal=INT,QUIT", "/bin/bash", "--norc", "--noprofile", "-i")
	cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "TERM=dumb", "HOME=/", "LC_ALL=C", "PS1=$ "}, env...)
	cmd.Dir = "/"
	return startOnPty(t, cmd)
}

// mountsUnder lists the mounts at root or below it, from the mount table.
func mountsUnder(root string) []string {
	ms, _ := mountinfo.Read()
	var under []string
	for _, m := range ms {
		if m.Dir == root || strings.HasPrefix(m.Dir, root+"/") {
			under = append(under, m.Dir+" ("+m.FSType+")")
		}
	}
	return under
}

// stopRoot stops whatever serves root and cleans its dead mounts, for a
// test's cleanup (ctxfs umount signals only root's own server).
func stopRoot(t *testing.T, root string) {
	exec.Command(ctxfsBin, "umount", "--root", root).Run()
	for _, d := range []string{"home", "shared"} {
		if mountsAt(filepath.Join(root, d)) > 0 {
			syscall.Unmount(filepath.Join(root, d), syscall.MNT_DETACH)
		}
	}
}

// `ctxfs umount` of a root whose server and watchdog were both killed
// (nothing cleaned its mounts: they are dead, ENOTCONN) detaches them and
// names each on stdout, exit 0. Before, it removed them silently.
func TestUmountNamesTheDeadMountsItCleans(t *testing.T) {
	s := newFuseServer(t)
	keepFusectlAsIs(t)
	t.Cleanup(func() { stopRoot(t, s.root) })
	wd := watchdogOf(s.cmd.Process.Pid)
	if wd == 0 {
		t.Fatal("the server has no watchdog")
	}
	testkit.Must(t, syscall.Kill(wd, syscall.SIGKILL))
	if _, gone := timeGone(wd, time.Now(), 5*time.Second); !gone {
		t.Fatalf("the watchdog (pid %d) survived SIGKILL", wd)
	}
	reaped(t, s.crash())
	if _, err := os.ReadDir(s.mnt("home")); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("ls of the killed server's home: %v, want ENOTCONN (a dead mount)", err)
	}

	out, code := ctxfsCmd(t, "umount", "--root", s.root)
	want := fmt.Sprintf("ctxfs: cleaned the dead mount %s (no server answered for it)\n", s.mnt("home")) +
		fmt.Sprintf("ctxfs: cleaned the dead mount %s (no server answered for it)\n", s.mnt("shared"))
	if code != 0 || out != want {
		t.Errorf("ctxfs umount of dead mounts: exit %d, %q; want 0, %q", code, out, want)
	}
	if left := mountsUnder(s.root); len(left) > 0 {
		t.Errorf("mounts left after ctxfs umount: %v", left)
	}
}

// A server whose stderr's reader stalls (a pipe nobody reads any more: tee
// stopped, a terminal held by Ctrl+S) still stops on SIGTERM, exit 0, and
// unmounts, and serves until then: a log line never waits for the reader
// (logx.Queue). Before, a run's log line blocked the send, and the
// "stopping" line the stop, for good (`ctxfs umount`: did not stop within
// 10s).
func TestStopWithAStalledStderr(t *testing.T) {
	requireFUSE(t)
	s := unstartedServer(t)
	t.Cleanup(func() { stopRoot(t, s.root) })
	r, w, err := os.Pipe()
	testkit.Must(t, err)
	t.Cleanup(func() { r.Close(); w.Close() })
	cmd := exec.Command(ctxfsBin, "mount", "--foreground", "--root", s.root, "--store", s.store)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	testkit.Must(t, cmd.Start())
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	eventually(t, 20*time.Second, "the server answers ping", func() bool {
		frames, err := s.request("coder", `{"op":"ping"}`)
		return err == nil && len(frames) == 1 && frames[0]["type"] == "pong"
	})

	fillPipe(t, w)
	// A run logs its start and end: neither may wait either.
	if frames, err := s.request("coder", `{"op":"send","id":"c1","session":"s","input":"logged while nobody reads"}`); err != nil || len(frames) == 0 || frames[len(frames)-1]["type"] != "done" {
		t.Fatalf("a send while the server's stderr stalls: %v %v", frames, err)
	}
	testkit.Must(t, cmd.Process.Signal(syscall.SIGTERM))
	if code := exitWithin(t, cmd, exited, 20*time.Second, func() string { return "its stderr stalled" }); code != 0 {
		t.Errorf("the server's exit status: %d, want 0", code)
	}
	if left := mountsUnder(s.root); len(left) > 0 {
		t.Errorf("mounts left after the server stopped: %v", left)
	}
}

// fillPipe fills the pipe whose write end is w until a write would block,
// through a descriptor of its own (O_NONBLOCK on w would change the
// server's descriptor too: they share one open file).
func fillPipe(t *testing.T, w *os.File) {
	t.Helper()
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", w.Fd()), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	testkit.Must(t, err)
	defer unix.Close(fd)
	chunk := make([]byte, 4096)
	for {
		if _, err := unix.Write(fd, chunk); err != nil {
			if err != unix.EAGAIN {
				t.Fatalf("fill the server's stderr pipe: %v", err)
			}
			return
		}
	}
}

// A server stops at once, exit 0, and closes its store cleanly (no journal
// file left, fsck clean) while another mount namespace holds copies of its
// mounts (made after it mounted: `unshare -m`, as `ip netns exec`, a
// systemd service's private /tmp or a container do), one of them busy with
// a `tail -f`; afterwards the copies are dead (ENOTCONN), as after the
// server's exit. Before, the server waited for its connections to end,
// which the copies kept alive as long as their namespace lived: `ctxfs
// umount` gave up after 10 s ("did not stop within 10s") and the kill
// that followed in CI left a journal file (TestJournalKill9,
// TestBackgroundMountSendsNoReadiness).
func TestStopWithCopiesInAnotherMountNamespace(t *testing.T) {
	s := newFuseServer(t)
	keepFusectlAsIs(t)
	t.Cleanup(func() { stopRoot(t, s.root) })
	s.send("s1", "m1", "hello")
	events := s.mnt(sessRel("s1") + "/messages.jsonl")
	ns := startProc(t, "unshare", "-m", "sh", "-c", `tail -f "$1" >/dev/null & echo ready; exec sleep 120`, "sh", events)
	waitLine(t, ns, "ready")
	inNS := func(args ...string) (string, error) {
		out, err := exec.Command("nsenter", append([]string{"-t", fmt.Sprint(ns.Process.Pid), "-m"}, args...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := inNS("cat", events); err != nil || !strings.Contains(out, "hello") {
		t.Fatalf("the other namespace's copy does not serve the session: %v\n%s", err, out)
	}

	if out, code := ctxfsCmd(t, "umount", "--root", s.root); code != 0 {
		t.Fatalf("ctxfs umount: exit %d\n%s", code, out)
	}
	if err := s.cmd.Wait(); err != nil {
		t.Errorf("the server: %v", err)
	}
	if !strings.Contains(s.logText(), " msg=stopped ") {
		t.Errorf("the server did not log its stop:\n%s", lastLines(s.logText(), 10))
	}
	if left := journalFiles(t, s.store); len(left) > 0 {
		t.Errorf("the stop left journal files %v", left)
	}
	if out, code := s.fsck(); code != 0 || out != "clean\n" {
		t.Errorf("fsck after the stop: exit %d\n%s", code, out)
	}
	if left := mountsUnder(s.root); len(left) > 0 {
		t.Errorf("mounts left here: %v", left)
	}
	if out, err := inNS("stat", s.mnt("home")); err == nil || !strings.Contains(out, "Transport endpoint is not connected") {
		t.Errorf("the other namespace's copy after the stop: %v %q, want ENOTCONN", err, out)
	}
}

// The same for a user's server (mounted through fusermount3; it ends its
// own connections through fusectl, whose files are the connection
// owner's): in a private mount namespace whose /dev/fuse the user may
// open, uid 65534 mounts, a copy of its mounts is made (`unshare -m`),
// and `ctxfs umount` stops the server at once, which ends the copy's
// connection (ENOTCONN). Before, the server waited for the copy until
// `ctxfs umount` gave up (10 s), and then for 5 s ("still open").
func TestUserServerStopWithCopiesInAnotherMountNamespace(t *testing.T) {
	requireFUSE(t)
	base := t.TempDir()
	openToAll(t, base)
	testkit.Must(t, os.Chmod(base, 0o755))
	testkit.Must(t, os.Chown(base, 65534, 65534))
	t.Cleanup(func() { stopRoot(t, filepath.Join(base, "ctx")) }) // signals the server through its pid file, whatever namespace it is in
	script := `mknod "$1/fuse" c 10 229; chmod 666 "$1/fuse"; mount --bind "$1/fuse" /dev/fuse
as_user() { setpriv --reuid=65534 --regid=65534 --clear-groups env -i PATH=/usr/bin:/bin HOME=/ "$@"; }
as_user "$2" mount --root "$3/ctx" --store "$3/store" >/dev/null
unshare -m sleep 60 >/dev/null 2>&1 & copy=$!
sleep 0.2
nsenter -t $copy -m setpriv --reuid=65534 --regid=65534 --clear-groups stat -c "before: %F" "$3/ctx/home" 2>&1 | sed 's/^/copy /'
as_user "$2" umount --root "$3/ctx"; echo "umount: exit $?"
nsenter -t $copy -m setpriv --reuid=65534 --regid=65534 --clear-groups stat "$3/ctx/home" 2>&1 | sed 's/^/copy: /'
kill $copy
grep -c "$3/ctx" /proc/self/mountinfo | sed 's/^/mounts left: /'
cat "$3/store/ctxfs.log"`
	text := inPrivateMountNamespace(t, script, t.TempDir(), ctxfsBin, base)
	for _, want := range []string{"copy before: directory\n", "umount: exit 0\n", "Transport endpoint is not connected", "mounts left: 0\n", " msg=stopped "} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in:\n%s", want, text)
		}
	}
	if strings.Contains(text, "still open") {
		t.Errorf("the server waited for the copy:\n%s", text)
	}
}

// The same for root's server on a machine without fusectl mounted (a
// container, a system without systemd): the server mounts fusectl where
// only its stopping thread sees it, ends the copy's connection at once
// (ENOTCONN) and leaves fusectl unmounted. Before, it waited 5 s for the
// copy, then closed the store with a warning ("still open"). The machine
// here is a private mount namespace, whose fusectl is unmounted.
func TestStopWithoutFusectl(t *testing.T) {
	requireFUSE(t)
	base := t.TempDir()
	t.Cleanup(func() { stopRoot(t, filepath.Join(base, "ctx")) })
	script := `umount /sys/fs/fuse/connections 2>/dev/null
grep -c " /sys/fs/fuse/connections " /proc/self/mountinfo | sed 's/^/fusectl before: /'
"$1" mount --root "$2/ctx" --store "$2/store" >/dev/null || exit 1
unshare -m sleep 60 >/dev/null 2>&1 & copy=$!
sleep 0.2
nsenter -t $copy -m stat -c "before: %F" "$2/ctx/home" 2>&1 | sed 's/^/copy /'
"$1" umount --root "$2/ctx"; echo "umount: exit $?"
nsenter -t $copy -m stat "$2/ctx/home" 2>&1 | sed 's/^/copy: /'
kill $copy
grep -c "$2/ctx" /proc/self/mountinfo | sed 's/^/mounts left: /'
grep -c " /sys/fs/fuse/connections " /proc/self/mountinfo | sed 's/^/fusectl after: /'
cat "$2/store/ctxfs.log"`
	text := inPrivateMountNamespace(t, script, ctxfsBin, base)
	for _, want := range []string{"fusectl before: 0\n", "copy before: directory\n", "umount: exit 0\n", "Transport endpoint is not connected", "mounts left: 0\n", "fusectl after: 0\n", " msg=stopped "} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in:\n%s", want, text)
		}
	}
	if strings.Contains(text, "still open") {
		t.Errorf("the server waited for the copy:\n%s", text)
	}
}

// inPrivateMountNamespace runs the shell script with args ($1 …) as root
// in a mount namespace of its own (`unshare -m --propagation private`),
// within 60 s, and returns its output; whatever it started is killed when
// it ends.
func inPrivateMountNamespace(t *testing.T, script string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", append([]string{"-m", "--propagation", "private", "sh", "-c", script, "sh"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // a copy's sleep and a server, had the script failed half way
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return string(out)
}

// A clean stop while a jailed run is running (`isolation chroot`: the
// jail's bind of its session is a copy of the mount in the jail's own
// namespace) exits 0, leaves no journal file and ends the run's program.
// Before, the server waited for the jail to let go of the mount, which it
// did only once the server killed the runs, after the unmount: `ctxfs
// umount` gave up after 10 s and the stop ended in a kill.
func TestStopWithAJailedRun(t *testing.T) {
	s := newJailServer(t, "#!/bin/sh\nsleep 300\n", true)
	go s.requestAsWithin(jailUser, "jailed", `{"op":"send","id":"j1","session":"j","input":"x"}`, 60*time.Second)
	sleeps := s.waitRunSleeps(t, jailUser.uid, 1)
	if out, code := ctxfsCmd(t, "umount", "--root", s.root); code != 0 {
		t.Fatalf("ctxfs umount: exit %d\n%s\nthe server's log ends:\n%s", code, out, lastLines(s.logText(), 10))
	}
	if err := s.cmd.Wait(); err != nil {
		t.Errorf("the server: %v", err)
	}
	if left := journalFiles(t, s.store); len(left) > 0 {
		t.Errorf("the stop left journal files %v", left)
	}
	waitGone(t, jailUser.uid, "after a clean stop", func() []int { return sleeps })
}
