package integration

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestArchivedDirHeldSetattr: a session archived through the mount while
// a process has its directory as working directory; a session of the same
// name is then made anew. A change of times through the held directory
// (/proc/PID/cwd) is a change of the archived directory, read only (EPERM,
// SPEC 12), but it was made at the directory's old path: the new live
// session's directory took the times given (two days back, which gc's
// --older-than-days reads).
func TestArchivedDirHeldSetattr(t *testing.T) {
	s := newFuseServer(t)
	s.send("temp-x", "c1", "hello")
	s.send("other", "c2", "hello")
	x := s.mnt(sessRel("temp-x"))
	holder := exec.Command("sleep", "30")
	holder.Dir = x
	testkit.Must(t, holder.Start())
	defer func() { holder.Process.Kill(); holder.Wait() }()
	arch := s.mnt("home/0/archived_sessions/coder")
	testkit.Must(t, os.MkdirAll(arch, 0o700))
	testkit.Must(t, unix.Renameat2(unix.AT_FDCWD, x, unix.AT_FDCWD, filepath.Join(arch, "temp-x"), unix.RENAME_NOREPLACE))
	testkit.Must(t, os.Mkdir(x, 0o700))
	live := filepath.Join(s.store, sessRel("temp-x"))
	before, err := os.Stat(live)
	testkit.Must(t, err)
	old := time.Now().Add(-48 * time.Hour)
	err = os.Chtimes("/proc/"+strconv.Itoa(holder.Process.Pid)+"/cwd", old, old)
	testkit.WantErrno(t, "utimes of the held archived directory", err, syscall.EPERM)
	after, err := os.Stat(live)
	testkit.Must(t, err)
	if !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("the new live session's directory went from mtime %v to %v by a change of the archived one", before.ModTime(), after.ModTime())
	}
}

// holdSession holds files of the session directory argv[1] open as it
// was when it started: messages.jsonl for appending and for reading, and
// state (for futimes and fchmod), ctl (for a request) and meta.json (for
// a value written and committed at its close). Each line of stdin names an operation
// and a descriptor; the holder answers 0 or the errno, and a read (also
// of the file opened again through /proc/self/fd) answers the bytes read.
const holdSession = `
import os, sys
d = sys.argv[1]
fds = {"log": os.open(d + "/messages.jsonl", os.O_WRONLY | os.O_APPEND),
       "reader": os.open(d + "/messages.jsonl", os.O_RDONLY),
       "state": os.open(d + "/state", os.O_RDONLY),
       "ctl": os.open(d + "/ctl", os.O_RDWR),
       "meta": os.open(d + "/meta.json", os.O_WRONLY)}
print("ready", flush=True)
for line in sys.stdin:
    op, name = line.split()
    fd = fds[name]
    try:
        if op == "append":
            os.write(fd, b'{"role":"user","content":"late"}\n')
        elif op == "utime":
            os.utime(fd, (946684800, 946684800))
        elif op == "chmod":
            os.fchmod(fd, 0o644)
        elif op == "commit":
            os.pwrite(fd, b'{"client":"ctx","scope":"private","self_id":"late"}\n', 0)
            os.close(fd)
        elif op == "request":
            os.write(fd, b'{"op":"send","id":"late","input":"late"}\n')
            while os.read(fd, 1 << 16):
                pass
        elif op == "read":
            print(len(os.pread(fd, 1 << 20, 0)), flush=True)
            continue
        elif op == "reopen":
            again = os.open("/proc/self/fd/%d" % fd, os.O_RDONLY)
            print(len(os.pread(again, 1 << 20, 0)), flush=True)
            os.close(again)
            continue
        elif op == "reopen-append":
            os.close(os.open("/proc/self/fd/%d" % fd, os.O_WRONLY | os.O_APPEND))
        print(0, flush=True)
    except OSError as e:
        print(e.errno, flush=True)
`

// holder is a process of uid 1001 holding a session's files (holdSession).
type holder struct {
	t   *testing.T
	in  io.WriteCloser
	out *bufio.Scanner
}

func holdFiles(t *testing.T, dir string) *holder { return holdScript(t, holdSession, dir) }

// holdScript runs the python script with args as uid 1001 and waits for
// its "ready" (its lines may be up to 1 MiB).
func holdScript(t *testing.T, script string, args ...string) *holder {
	cmd := exec.Command("/usr/bin/python3", append([]string{"-c", script}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001}}
	in, err := cmd.StdinPipe()
	testkit.Must(t, err)
	outPipe, err := cmd.StdoutPipe()
	testkit.Must(t, err)
	cmd.Stderr = os.Stderr
	testkit.Must(t, cmd.Start())
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	h := &holder{t: t, in: in, out: bufio.NewScanner(outPipe)}
	h.out.Buffer(make([]byte, 1<<20), 1<<20)
	if !h.out.Scan() || h.out.Text() != "ready" {
		t.Fatalf("the holder: %q", h.out.Text())
	}
	return h
}

// do has the holder do op through the descriptor name and returns its answer.
func (h *holder) do(op, name string) int {
	h.t.Helper()
	fmt.Fprintln(h.in, op, name)
	if !h.out.Scan() {
		h.t.Fatalf("the holder ended at %s %s", op, name)
	}
	n, err := strconv.Atoi(h.out.Text())
	testkit.Must(h.t, err)
	return n
}

// fileTimes is a store file's bytes, mode and times.
func fileTimes(t *testing.T, p string) string {
	st, err := os.Stat(p)
	testkit.Must(t, err)
	b, err := os.ReadFile(p)
	testkit.Must(t, err)
	return fmt.Sprintf("%v %v %x", st.Mode(), st.ModTime().UnixNano(), sha256.Sum256(b))
}

// TestArchivedFilesHeld: files of a session held open across its archive
// (as the user, through the mount) act on the archived files, read only,
// never on a session made anew at the same path: a line appended through
// a descriptor of messages.jsonl opened before landed in the new session,
// and a futimes of a held state set the new session's state's times. Now
// each is the archive's EPERM, and a reader goes on reading what it read.
func TestArchivedFilesHeld(t *testing.T) {
	s := newFuseServer(t)
	s.sendAs(uid1001, "temp-x", "c1", "", "hello")
	s.sendAs(uid1001, "other", "c2", "", "hello")
	rel := "home/1001/agent/coder/session/temp-x"
	h := holdFiles(t, s.mnt(rel))
	readBefore := h.do("read", "reader")
	out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "session", "archive", "coder", "temp-x")
	if code != 0 {
		t.Fatalf("archive as uid 1001: exit %d\n%s%s", code, out, errs)
	}
	s.sendAs(uid1001, "temp-x", "c3", "", "anew")
	settle() // the new session's state reaches the store behind the send (behind.Every), not by the held files
	heldChecks(t, s, h, rel, readBefore, syscall.EPERM)
}

// TestDeletedFilesHeld: TestArchivedFilesHeld for a session deleted
// (gc --delete --yes) while its files and its directory (a working
// directory) are held: each change through them is ENOENT (the session is
// gone), none reaches the session made anew, and nothing of that session
// is found through the held directory.
func TestDeletedFilesHeld(t *testing.T) {
	s := newFuseServer(t)
	s.sendAs(uid1001, "temp-x", "c1", "", "hello")
	s.sendAs(uid1001, "other", "c2", "", "hello")
	rel := "home/1001/agent/coder/session/temp-x"
	h := holdFiles(t, s.mnt(rel))
	cwd := exec.Command("sleep", "30")
	cwd.Dir = s.mnt(rel)
	cwd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001}}
	testkit.Must(t, cwd.Start())
	defer func() { cwd.Process.Kill(); cwd.Wait() }()
	readBefore := h.do("read", "reader")
	out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "session", "gc", "coder", "--pattern", "temp-x", "--delete", "--yes")
	if code != 0 {
		t.Fatalf("gc --delete as uid 1001: exit %d\n%s%s", code, out, errs)
	}
	s.sendAs(uid1001, "temp-x", "c3", "", "anew")
	settle() // the new session's state reaches the store behind the send (behind.Every), not by the held files
	live := filepath.Join(s.store, rel)
	before, err := os.Stat(live)
	testkit.Must(t, err)
	held := "/proc/" + strconv.Itoa(cwd.Process.Pid) + "/cwd"
	old := time.Now().Add(-48 * time.Hour)
	testkit.WantErrno(t, "utimes of the held deleted directory", os.Chtimes(held, old, old), syscall.ENOENT)
	_, err = os.ReadFile(held + "/state")
	testkit.WantErrno(t, "a file looked up through the held deleted directory", err, syscall.ENOENT)
	after, err := os.Stat(live)
	testkit.Must(t, err)
	if !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("the new session's directory went from mtime %v to %v by a change of the deleted one", before.ModTime(), after.ModTime())
	}
	heldChecks(t, s, h, rel, readBefore, syscall.ENOENT)
}

// heldChecks: with the session at rel made anew, the holder's changes
// through its descriptors are refused with want and leave the new
// session's files as they were; its reader reads the bytes it read.
func heldChecks(t *testing.T, s *server, h *holder, rel string, readBefore int, want syscall.Errno) {
	log, state, meta := filepath.Join(s.store, rel, "messages.jsonl"), filepath.Join(s.store, rel, "state"), filepath.Join(s.store, rel, "meta.json")
	logBefore, stateBefore, metaBefore := fileTimes(t, log), fileTimes(t, state), fileTimes(t, meta)
	for _, op := range [][2]string{{"append", "log"}, {"utime", "state"}, {"chmod", "state"}, {"utime", "log"}, {"request", "ctl"}, {"commit", "meta"}} {
		if got := syscall.Errno(h.do(op[0], op[1])); got != want {
			t.Errorf("%s through the held %s: errno %d (%v), want %v", op[0], op[1], got, got, want)
		}
	}
	if got := h.do("read", "reader"); got != readBefore {
		t.Errorf("the held reader read %d bytes, %d before", got, readBefore)
	}
	// Opened again through the descriptor: the archived file, read only;
	// nothing once deleted.
	wantReopen, wantAppend := readBefore, int(syscall.EACCES)
	if want == syscall.ENOENT {
		wantReopen, wantAppend = int(syscall.ENOENT), int(syscall.ENOENT)
	}
	if got := h.do("reopen", "reader"); got != wantReopen {
		t.Errorf("the held reader opened again read %d, want %d", got, wantReopen)
	}
	if got := h.do("reopen-append", "log"); got != wantAppend {
		t.Errorf("the held log opened again for appending: %d, want %d", got, wantAppend)
	}
	if got := fileTimes(t, log); got != logBefore {
		t.Errorf("the new session's messages.jsonl went from %s to %s", logBefore, got)
	}
	if got := fileTimes(t, state); got != stateBefore {
		t.Errorf("the new session's state went from %s to %s", stateBefore, got)
	}
	if got := fileTimes(t, meta); got != metaBefore {
		t.Errorf("the new session's meta.json went from %s to %s", metaBefore, got)
	}
}

// holdContext holds argv[1] open for reading, and on each line of stdin
// sets its times, then its mode, through the descriptor: it answers 0 or
// the errno of each.
const holdContext = `
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
print("ready", flush=True)
for line in sys.stdin:
    for change in (lambda: os.utime(fd, (946684800, 946684800)), lambda: os.fchmod(fd, 0o600)):
        try:
            change()
            print(0, flush=True)
        except OSError as e:
            print(e.errno, flush=True)
`

// TestContextFilesHeld: a file of a session's context/ (a free tree) held
// across the session's archive or delete by the server (the socket's
// archive op, gc --delete: the mount's tree is not moved) stood for the
// same name of a session made anew at the path (go-fuse keeps the parent
// of a replaced child): a futimes and an fchmod through it changed the new
// session's file. Now they are the archive's EPERM, or ENOENT once deleted.
func TestContextFilesHeld(t *testing.T) {
	for _, c := range []struct {
		name, req string
		want      syscall.Errno
	}{
		{"archive", `{"op":"archive","session":"temp-x"}`, syscall.EPERM},
		{"delete", `{"op":"archive","session":"temp-x","delete":true}`, syscall.ENOENT},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newFuseServer(t)
			s.sendAs(uid1001, "temp-x", "c1", "", "hello")
			s.sendAs(uid1001, "other", "c2", "", "hello")
			f := s.mnt("home/1001/agent/coder/session/temp-x/context/f.txt")
			if out, err := bashAs(t, uid1001, "echo one > "+f); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			h := holdScript(t, holdContext, f)
			if frames, raw, err := s.requestAs(uid1001, "coder", c.req); err != nil || len(frames) != 1 {
				t.Fatalf("%s: %v %s", c.req, err, raw)
			}
			s.sendAs(uid1001, "temp-x", "c3", "", "anew")
			if out, err := bashAs(t, uid1001, "echo two > "+f+"; chmod 640 "+f); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			p := filepath.Join(s.store, "home/1001/agent/coder/session/temp-x/context/f.txt")
			before := fileTimes(t, p)
			fmt.Fprintln(h.in, "go")
			for _, what := range []string{"futimes", "fchmod"} {
				if !h.out.Scan() {
					t.Fatal("the holder ended")
				}
				if got := h.out.Text(); got != strconv.Itoa(int(c.want)) {
					t.Errorf("%s through the held context file: %s, want %d", what, got, c.want)
				}
			}
			if got := fileTimes(t, p); got != before {
				t.Errorf("the new session's context/f.txt went from %s to %s", before, got)
			}
		})
	}
}
