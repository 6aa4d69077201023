package integration

import (
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
