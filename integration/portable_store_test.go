package integration

import (
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
	"golang.org/x/sys/unix"
)

// TestPortableStore: a server made to do without renameat2's flags, hard
// links and directory fsync (CTXFS_STORE_PORTABLE=all, the store as it is
// on MooseFS, GlusterFS or NFS) says so in its log; it creates sessions
// (the send that failed "EINVAL: create session default" on MooseFS),
// keeps their derived values, and archives a session never over one
// already archived under its name (EEXIST, neither tree changed); fsck
// says the ways and finds the store clean.
func TestPortableStore(t *testing.T) {
	s := newFuseServerWith(t, func(s *server) { s.env = append(s.env, "CTXFS_STORE_PORTABLE=all") })
	s.waitLogText("CTXFS_STORE_PORTABLE=all") // the log is written behind (logx.Queue)
	if log := s.logText(); !strings.Contains(log, "store ways") || !strings.Contains(log, "moves: portable") || !strings.Contains(log, "CTXFS_STORE_PORTABLE=all") {
		t.Errorf("the server's log does not say the store's ways:\n%s", log)
	}
	for i, n := range []string{"default", "s1", "s2", "s1"} { // s1 last: the current session, never archived
		s.send(n, "c-"+n+strconv.Itoa(i), "hello "+n)
	}
	if got := s.readMnt(sessRel("s1") + "/messages.jsonl"); strings.Count(got, "hello s1") != 4 { // each send: the input and its echo
		t.Errorf("s1's messages: %q", got)
	}
	if got := s.readMnt(sessRel("s1") + "/state"); got != "done\n" {
		t.Errorf("s1's state (a derived value, swapped by rename) = %q", got)
	}

	archived := "home/0/archived_sessions/coder/"
	testkit.Must(t, os.MkdirAll(s.mnt(archived), 0o700))
	archive := func(name string) error {
		return unix.Renameat2(unix.AT_FDCWD, s.mnt(sessRel(name)), unix.AT_FDCWD, s.mnt(archived+name), unix.RENAME_NOREPLACE)
	}
	testkit.Must(t, archive("s2"))
	s.send("s2", "c-s2-again", "hello again")
	s.send("s1", "c-s1-again", "hello again") // s1 current again
	settle()
	live, gone := filepath.Join(s.store, coderRel, "session", "s2"), filepath.Join(s.store, archived, "s2")
	liveTree, goneTree := treeContent(t, live), treeContent(t, gone)
	testkit.WantErrno(t, "archive over an archived session", archive("s2"), syscall.EEXIST)
	if !maps.Equal(liveTree, treeContent(t, live)) || !maps.Equal(goneTree, treeContent(t, gone)) {
		t.Errorf("a refused archive changed a session")
	}

	out, errs, code := fsckEnv(t, []string{"CTXFS_STORE_PORTABLE=all"}, "--store", s.store)
	if code != 0 || out != "clean\n" || !strings.Contains(errs, "store ways: moves: portable") {
		t.Errorf("fsck of the portable store: exit %d\nstdout %q\nstderr %q", code, out, errs)
	}
}
