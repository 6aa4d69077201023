package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
	"golang.org/x/sys/unix"
)

// Issue 19, finding 5: one user stopped the server from starting for
// everyone by putting a FIFO in place of their own messages.jsonl while
// the journal still held appends for it. Now the start keeps that log's
// records aside, never opens what is there, and serves everyone else; the
// user's session is unprovable (EIO, nothing written) and fsck names it;
// once an administrator puts the file back and runs fsck --repair, as the
// README says, the session is provable again with the kept appends. The
// same for a missing log, a directory in its place and a damaged seal.
func TestRecoverSetsAsideALogItCannotRecover(t *testing.T) {
	for _, sp := range []struct {
		name, file string // file: what the user spoils, in the session
		do         func(t *testing.T, p string)
	}{
		{"fifo", "messages.jsonl", func(t *testing.T, p string) {
			testkit.Must(t, os.Remove(p))
			testkit.Must(t, unix.Mkfifo(p, 0o600))
			testkit.Must(t, os.Chown(p, 1001, 1001))
		}},
		{"missing", "messages.jsonl", func(t *testing.T, p string) { testkit.Must(t, os.Remove(p)) }},
		{"directory", "messages.jsonl", func(t *testing.T, p string) {
			testkit.Must(t, os.Remove(p))
			testkit.Must(t, os.Mkdir(p, 0o700))
			testkit.Must(t, os.Chown(p, 1001, 1001))
		}},
		{"damaged seal", ".seal/messages.jsonl", func(t *testing.T, p string) {
			testkit.Must(t, os.WriteFile(p, []byte(strings.Repeat("\xee", 1024)), 0o600))
		}},
	} {
		t.Run(sp.name, func(t *testing.T) { recoverSetsAside(t, sp.file, sp.do) })
	}
}

// recoverSetsAside is one case of TestRecoverSetsAsideALogItCannotRecover:
// spoil does to the file at path what the user did.
func recoverSetsAside(t *testing.T, file string, spoil func(t *testing.T, path string)) {
	u1, u2 := &cred{uid: 1001, gid: 1001}, &cred{uid: 1002, gid: 1002}
	var runA2 any // the run of uid 1001's last send before the kill
	s, jf := killedAfter(t, func(s *server) {
		for i := 0; i < 3; i++ {
			runA2 = s.sendAs(u1, "a", fmt.Sprintf("a-%d", i), "", fmt.Sprintf("durable send %d of uid 1001", i))[0]["run"]
			s.sendAs(u2, "b", fmt.Sprintf("b-%d", i), "", fmt.Sprintf("durable send %d of uid 1002", i))
		}
	})
	dirA, dirB := s.sessionDir(1001, "coder", "a"), s.sessionDir(1002, "coder", "b")
	logA, spoilt := filepath.Join(dirA, "messages.jsonl"), filepath.Join(dirA, file)
	keptLog, keptFile := fileBytes(t, logA), fileBytes(t, spoilt)
	if !strings.Contains(fileBytes(t, jf), "durable send 2 of uid 1001") {
		t.Fatalf("the journal %s does not hold uid 1001's last send: nothing to recover", jf)
	}
	var orig unix.Stat_t
	testkit.Must(t, unix.Lstat(spoilt, &orig))
	// The user (standing in: root, giving what it made to the user) spoils it.
	spoil(t, spoilt)
	var was unix.Stat_t
	fifo := unix.Lstat(logA, &was) == nil && was.Mode&unix.S_IFMT == unix.S_IFIFO

	s.start() // waitReady: it answers within its 20 s bound, or the test fails
	eventually(t, 10*time.Second, "both mounts up", func() bool {
		return mountsAt(s.mnt("home")) == 1 && mountsAt(s.mnt("shared")) == 1
	})
	if left := journalFiles(t, s.store); len(left) != 1 || left[0] == jf {
		t.Errorf("journal files after the start: %v, want only the new server's", left)
	}

	// Everyone else is served: uid 1002 sends, and reads through the mount
	// what the store holds.
	s.sendAs(u2, "b", "b-after", "", "after the restart")
	mntB := s.mnt("home/1002/agent/coder/session/b/messages.jsonl")
	out, err := bashAs(t, u2, "cat "+mntB)
	if err != nil || out != fileBytes(t, filepath.Join(dirB, "messages.jsonl")) || !strings.Contains(out, "after the restart") {
		t.Errorf("uid 1002 reads its log through the mount: %v\n%s", err, out)
	}

	// uid 1001's session is unprovable: a send is EIO and writes nothing.
	before := settledSnapshot(t, dirA) // what the start's recovery wrote, as the store settled
	frames, raw, err := s.requestAs(u1, "coder", `{"op":"send","id":"a-after","session":"a","input":"refused"}`)
	if err != nil || errorCode(frames) != "EIO" {
		t.Errorf("uid 1001's send to its held session: %v, want EIO\n%s", err, raw)
	}
	frames, raw, err = s.requestAs(u1, "coder", replayA2)
	if err != nil || errorCode(frames) != "EIO" {
		t.Errorf("uid 1001's replay of a send to its held session: %v, want EIO\n%s", err, raw)
	}
	diffs, reads := hostDiffs(before, hostSnapshot(t, dirA))
	if len(diffs) > 0 {
		t.Errorf("the refused send changed the session:\n%s", strings.Join(diffs, "\n"))
	}
	judged := sync.OnceValue(func() bool { return snapshotsKeepAtimes(t, s.store) }) // probed once, if a read is seen
	for _, r := range reads {
		switch {
		case !strings.Contains(r, "messages.jsonl"):
		case judged():
			t.Errorf("the spoilt log was read: %s", r)
		default:
			t.Logf("the store's filesystem moves atimes when the test only looks (reads not judged): %s", r)
		}
	}
	// What can be read still is: the session's events, through the mount.
	mntA := s.mnt("home/1001/agent/coder/session/a/events.jsonl")
	if out, err := bashAs(t, u1, "cat "+mntA); err != nil || !strings.Contains(out, "a-2") {
		t.Errorf("uid 1001 reads its events through the mount: %v\n%s", err, out)
	}
	if fifo {
		fifoUntouched(t, logA, &was)
		noDescriptorOf(t, s.cmd.Process.Pid, &was)
	}

	out, code := s.fsck()
	if code != 1 || fsckLine(out, logA+": ", "kept in") == "" || !strings.Contains(out, "fsck --repair") {
		t.Errorf("fsck with a held log: exit %d, want 1 and a line naming %s, what is kept and what to do:\n%s", code, logA, out)
	}
	t.Logf("fsck:\n%s", out)

	// The administrator does what the README says: stop the server, put
	// the log back (its bytes, owned as its seal), run fsck --repair.
	s.kill(s.cmd, syscall.SIGTERM)
	if fifo {
		fifoUntouched(t, logA, &was)
	}
	testkit.Must(t, os.RemoveAll(spoilt))
	testkit.Must(t, os.WriteFile(spoilt, []byte(keptFile), os.FileMode(orig.Mode).Perm()))
	testkit.Must(t, os.Chown(spoilt, int(orig.Uid), int(orig.Gid)))
	out, code = s.fsck("--repair")
	t.Logf("fsck --repair: exit %d\n%s", code, out)
	if code != 0 || fsckLine(out, logA+": ", "applied") == "" {
		t.Errorf("fsck --repair: exit %d, want 0 and a line saying it applied the kept appends to %s", code, logA)
	}
	if out, code := s.fsck(); code != 0 || out != "clean\n" {
		t.Errorf("fsck after the repair: exit %d\n%s", code, out)
	}
	if got := fileBytes(t, logA); got != keptLog {
		t.Errorf("the repaired log holds %d bytes, want the %d it had with the kept appends", len(got), len(keptLog))
	}
	s.start()
	s.sendAs(u1, "a", "a-repaired", "", "after the repair")
	frames, raw, err = s.requestAs(u1, "coder", replayA2)
	if err != nil || !hasFrame(frames, "done") || frames[0]["run"] != runA2 {
		t.Errorf("a replay of a kept send to the repaired session: %v\n%s", err, raw)
	}
	if got := fileBytes(t, logA); !strings.HasPrefix(got, keptLog) || !strings.Contains(got[len(keptLog):], "after the repair") {
		t.Errorf("the repaired session's log does not hold the kept appends, then the new send:\n%s", got)
	}
}

// replayA2 sends uid 1001's last send before the kill again: a replay
// (SPEC: the same id and input), which reads the session's history.
const replayA2 = `{"op":"send","id":"a-2","session":"a","input":"durable send 2 of uid 1001"}`

// fifoUntouched fails unless the FIFO at p is the one made (same inode,
// times) and no process holds it open (a writer that does not wait finds
// no reader: ENXIO).
func fifoUntouched(t *testing.T, p string, was *unix.Stat_t) {
	t.Helper()
	var st unix.Stat_t
	testkit.Must(t, unix.Lstat(p, &st))
	if st.Ino != was.Ino || st.Mode != was.Mode || st.Mtim != was.Mtim || st.Ctim != was.Ctim || st.Atim != was.Atim {
		t.Errorf("the FIFO at %s changed: %+v, was %+v", p, st, *was)
	}
	fd, err := unix.Open(p, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
		t.Errorf("someone holds the FIFO %s open for reading", p)
	} else if err != unix.ENXIO {
		t.Errorf("open the FIFO %s for writing, without waiting: %v, want ENXIO (no reader)", p, err)
	}
}

// noDescriptorOf fails when process pid holds a descriptor of the file st.
func noDescriptorOf(t *testing.T, pid int, st *unix.Stat_t) {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	testkit.Must(t, err)
	for _, e := range ents {
		var fst unix.Stat_t
		if unix.Stat(filepath.Join(dir, e.Name()), &fst) == nil && fst.Ino == st.Ino && fst.Dev == st.Dev {
			t.Errorf("the server (pid %d) holds descriptor %s of the FIFO", pid, e.Name())
		}
	}
}
