package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// userFUSE mounts a FUSE filesystem of type fuse.NAME at dir for c,
// served by hangfs running as c: the mount fusermount3 makes for a user
// (nosuid, nodev, user_id and group_id c's, no allow_other) where
// /dev/fuse is 0666, as most distributions ship it (on this machine it
// is root's alone, so the test opens it and hands it over). It is taken
// away at cleanup.
func userFUSE(t *testing.T, c *cred, dir, name string, extra ...string) *proc {
	t.Helper()
	hangfs := buildHangfs(t)
	testkit.Must(t, os.Chmod(filepath.Dir(hangfs), 0o755))
	dev := mountFUSEFor(t, c, "hangfs", dir, name, extra)
	defer dev.Close()
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	h := &proc{Cmd: exec.Command(hangfs, "/dev/fd/3", "-"), lines: make(chan string, 16)}
	h.ExtraFiles = []*os.File{dev}
	startAs(t, h, c)
	waitLine(t, h, "ready")
	return h
}

// A user's own FUSE mount says it is ctxfs (fuse.ctxfs) at DIR/home, and
// DIR/agent/.ctxfs.pid, where clean-stale looks for the server of DIR, is
// a FIFO of theirs: root's `ctxfs clean-stale` must neither wait on it
// for ever nor touch the user's live mount.
func TestCleanStaleUserFIFOPidFile(t *testing.T) {
	requireFUSE(t)
	base := t.TempDir()
	testkit.Must(t, os.Chmod(base, 0o755))
	openToAll(t, base+"/x")
	evil := filepath.Join(base, "evil")
	testkit.Must(t, os.Mkdir(evil, 0o755))
	testkit.Must(t, os.Chown(evil, int(owner.uid), int(owner.gid)))
	if out, err := bashAs(t, owner, "mkdir -p "+evil+"/home "+evil+"/agent && mkfifo "+evil+"/agent/.ctxfs.pid"); err != nil {
		t.Fatalf("as uid 1001: %v\n%s", err, out)
	}
	home := filepath.Join(evil, "home")
	userFUSE(t, owner, home, "ctxfs")
	if n := mountsAt(home); n != 1 {
		t.Fatalf("the user's mount at %s: %d mounts", home, n)
	}
	out, code := ctxfsCmd(t, "clean-stale", "--under", base)
	if code != 0 || out != "" {
		t.Errorf("clean-stale --under %s: exit %d, %q; want 0 and nothing cleaned", base, code, out)
	}
	if n := mountsAt(home); n != 1 {
		t.Errorf("the user's live mount was touched: %d mounts", n)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(evil, "agent", ".ctxfs.pid"), &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		t.Errorf("the user's FIFO: %v, mode %o", err, st.Mode)
	}
}

// deadUserFUSE mounts at dir a FUSE filesystem of type fuse.NAME for c
// whose server is gone (a user's, as fusermount3 makes it, once they
// killed their server), with the extra mount options.
func deadUserFUSE(t *testing.T, c *cred, dir, name string, extra ...string) {
	t.Helper()
	mountFUSEFor(t, c, "userfs", dir, name, extra).Close()
}

// mountFUSEFor mounts at dir a FUSE filesystem of type fuse.NAME from
// source for c, as fusermount3 makes a user's (nosuid, nodev, user_id
// and group_id c's), with the extra mount options, and returns the
// /dev/fuse descriptor that serves it, the caller's to close.
func mountFUSEFor(t *testing.T, c *cred, source, dir, name string, extra []string) *os.File {
	t.Helper()
	dev, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	testkit.Must(t, err)
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=%d,group_id=%d", dev.Fd(), c.uid, c.gid)
	for _, o := range extra {
		opts += "," + o
	}
	if err := syscall.Mount(source, dir, "fuse."+name, syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		dev.Close()
		t.Fatal(err)
	}
	return dev
}

// swapOpened exchanges the names a and b (renameat2 RENAME_EXCHANGE) as
// fast as it can, and says "opened" and ends once a writer's open of the
// FIFO fifo succeeds: someone opened it to read.
const swapOpened = `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b, fifo = sys.argv[1].encode(), sys.argv[2].encode(), sys.argv[3]
print("swapping", flush=True)
i = 0
while True:
    libc.syscall(316, -100, a, -100, b, 2)
    i += 1
    if i % 500 == 0:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            print("opened", flush=True)
            sys.exit(0)
        except OSError:
            pass
`

// Root's `ctxfs clean-stale` opens each ctxfs mount it finds to see
// whether a server answers. A user's mount that says it is ctxfs, at
// DIR/x, where DIR is a directory of theirs that they keep swapping with a
// symlink to a directory holding a FIFO x: the probe must open the
// mount's directory and nothing a symlink leads to (a FIFO, a device
// whose open does something: /dev/watchdog).
func TestCleanStaleOpensNoUserPath(t *testing.T) {
	requireFUSE(t)
	keepFusectlAsIs(t)
	base := t.TempDir()
	openToAll(t, base+"/x")
	testkit.Must(t, os.Chown(base, int(owner.uid), int(owner.gid)))
	evil, link, fifo := filepath.Join(base, "evil"), filepath.Join(base, "link"), filepath.Join(base, "bait", "x")
	if out, err := bashAs(t, owner, "mkdir -p "+evil+"/x "+base+"/bait && mkfifo "+fifo+" && ln -s bait "+link); err != nil {
		t.Fatalf("as uid 1001: %v\n%s", err, out)
	}
	mp := filepath.Join(evil, "x")
	deadUserFUSE(t, owner, mp, "ctxfs")
	t.Cleanup(func() {
		if st, err := os.Lstat(evil); err == nil && st.Mode()&os.ModeSymlink != 0 {
			testkit.Must(t, unix.Renameat2(unix.AT_FDCWD, evil, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE))
		}
		for mountsAt(mp) > 0 {
			testkit.Must(t, syscall.Unmount(mp, syscall.MNT_DETACH|unix.UMOUNT_NOFOLLOW))
		}
	})
	sw := &proc{Cmd: exec.Command("/usr/bin/python3", "-c", swapOpened, evil, link, fifo), lines: make(chan string, 16)}
	startAs(t, sw, owner)
	waitLine(t, sw, "swapping")
	// The old probe opened the FIFO within 15 attempts (well under a
	// second) in each of three runs.
	deadline := time.Now().Add(5 * time.Second)
	for attempt := 1; time.Now().Before(deadline); attempt++ {
		ctxfsCmd(t, "clean-stale", "--under", base)
		select {
		case l := <-sw.lines:
			t.Fatalf("attempt %d: root's clean-stale opened the user's FIFO through their symlink (%q)", attempt, l)
		default:
		}
	}
}

// swapper exchanges the names a and b (renameat2 RENAME_EXCHANGE) as fast
// as it can until killed.
const swapper = `
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = sys.argv[1].encode(), sys.argv[2].encode()
print("swapping", flush=True)
while True:
    libc.syscall(316, -100, a, -100, b, 2)
`

// Where fuse.conf has user_allow_other, a user's FUSE mount may be
// allow_other, and root's probe of it reaches its server: dead, root's
// clean-stale takes it away. A user who keeps swapping the directory of
// theirs above it with a symlink to a directory of someone else's must
// not have root detach what the path reaches then (here a tmpfs of
// root's: any mount of the machine).
func TestCleanStaleDetachesOnlyWhatItProbed(t *testing.T) {
	requireFUSE(t)
	keepFusectlAsIs(t)
	base := t.TempDir()
	openToAll(t, base+"/x")
	testkit.Must(t, os.Chown(base, int(owner.uid), int(owner.gid)))
	victim := filepath.Join(base, "victim", "x")
	testkit.Must(t, os.MkdirAll(victim, 0o755))
	testkit.Must(t, syscall.Mount("tmpfs", victim, "tmpfs", 0, "size=64k"))
	t.Cleanup(func() { syscall.Unmount(victim, syscall.MNT_DETACH) })
	evil, link := filepath.Join(base, "evil"), filepath.Join(base, "link")
	if out, err := bashAs(t, owner, "mkdir -p "+evil+"/x && ln -s victim "+link); err != nil {
		t.Fatalf("as uid 1001: %v\n%s", err, out)
	}
	mp := filepath.Join(evil, "x")
	restore := func() {
		if st, err := os.Lstat(evil); err == nil && st.Mode()&os.ModeSymlink != 0 {
			testkit.Must(t, unix.Renameat2(unix.AT_FDCWD, evil, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE))
		}
		for mountsAt(mp) > 0 {
			testkit.Must(t, syscall.Unmount(mp, syscall.MNT_DETACH|unix.UMOUNT_NOFOLLOW))
		}
	}
	t.Cleanup(restore)
	// The old unmount by path detached the victim within 9 to 50 attempts
	// (under 4 s) in each of four runs.
	deadline, cleaned := time.Now().Add(10*time.Second), 0
	for attempt := 1; time.Now().Before(deadline); attempt++ {
		deadUserFUSE(t, owner, mp, "ctxfs", "allow_other")
		sw := &proc{Cmd: exec.Command("/usr/bin/python3", "-c", swapper, evil, link), lines: make(chan string, 16)}
		startAs(t, sw, owner)
		waitLine(t, sw, "swapping")
		out, _ := ctxfsCmd(t, "clean-stale", "--under", base)
		syscall.Kill(-sw.Process.Pid, syscall.SIGKILL)
		sw.Wait()
		restore()
		if mountsAt(victim) != 1 {
			t.Fatalf("attempt %d: root's clean-stale detached %s, which it never probed; it said %q", attempt, victim, out)
		}
		if strings.Contains(out, "cleaned the dead mount") {
			cleaned++
		}
	}
	if cleaned == 0 {
		t.Errorf("clean-stale never took the user's dead mount away: the unmount was not tried")
	}
	t.Logf("the user's dead mount taken away %d times", cleaned)
}

// A member of a shared space may write its session directories, so
// fusermount3 lets them mount a FUSE filesystem of theirs over one
// (allow_other where fuse.conf has user_allow_other). Another member's
// jailed run of that session must not be shown it as its session
// directory: the jail binds the session from the server's mount alone,
// and a mount below it fails the run (EXDEV).
func TestJailSessionUnderMemberMount(t *testing.T) {
	s := newJailServer(t, "#!/bin/sh\necho \"session: $(ls $CTX_SESSION_DIR 2>&1 | tr '\\n' ' ')\"\n", false)
	s.spaceAdd("team", 1234)
	alice, bob := &cred{uid: 1001, gid: 1001, groups: []uint32{1234}}, &cred{uid: 1002, gid: 1002, groups: []uint32{1234}}
	s.jailBusybox(t, bob.uid, "jailed")
	send := func(id string) ([]frame, string) {
		frames, raw, err := s.requestAs(bob, "jailed", fmt.Sprintf(`{"op":"send","id":%q,"session":"plan","scope":"shared","space":"team","input":"hi"}`, id))
		if err != nil || len(frames) == 0 {
			t.Fatalf("send: %v\n%s\nlog:\n%s", err, raw, s.logText())
		}
		return frames, deltaText(frames)
	}
	if frames, text := send("b1"); frames[len(frames)-1]["status"] != "ok" {
		t.Fatalf("the first run: %v\n%s", frames, text)
	}
	dir := s.mnt("shared/team/agent/jailed/session/plan")
	if out, err := bashAs(t, alice, "test -w "+dir+" && echo writable"); err != nil || out != "writable\n" {
		t.Fatalf("uid 1001 may not write %s (fusermount3 would refuse): %v %q", dir, err, out)
	}
	userFUSE(t, alice, dir, "hangfs", "allow_other")
	frames, text := send("b2")
	if strings.Contains(text, "session: f") {
		t.Errorf("bob's jailed run was shown alice's filesystem as its session: %q", text)
	}
	if code := errorCode(frames); code != "EXDEV" {
		t.Errorf("the run below a member's mount: %q, want EXDEV; frames %v", code, frames)
	}
}
