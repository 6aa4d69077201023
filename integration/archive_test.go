package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
	"golang.org/x/sys/unix"
)

// gcProgram answers with its input, or sleeps when asked to: a session
// with a sleeping run is active.
const gcProgram = "#!/bin/sh\nread x\n[ \"$x\" = sleep ] && exec sleep 60\necho \"$x\"\n"

// treeContent is a tree's files by path: type, mode and a hash of the
// bytes (times left out: a rename changes a directory's ctime).
func treeContent(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			out[p] = "error " + err.Error()
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		v := info.Mode().String()
		// A seal's records are brought up to date when its session is
		// closed to move (the write-ahead journal's checkpoint): what they
		// vouch for is checked by fsck, not byte for byte.
		if info.Mode().IsRegular() && !(filepath.Base(filepath.Dir(p)) == ".seal" && strings.HasSuffix(p, ".jsonl")) {
			b, _ := os.ReadFile(p)
			sum := sha256.Sum256(b)
			v += " " + hex.EncodeToString(sum[:8])
		}
		out[rel] = v
		return nil
	})
	return out
}

// ctx runs the real client as root against the server's mount and
// returns its output (stdout, then stderr) and exit status.
func (s *server) ctx(t testing.TB, args ...string) (string, int) {
	t.Helper()
	out, errs, code := ctxSplit(t, s, args...)
	return out + errs, code
}

// newGCServer starts a server whose coder has these sessions: matching
// the default patterns (temp-a, temp-b, e2e-x, my-smoke, keep-smoke),
// protected ones (default; repro-cur, the current session, sent last;
// spark-live, active; ansi-bad, with a planted state), install-old
// (no state file: eligible) and notes (matches nothing).
func newGCServer(t *testing.T) *server {
	requireFUSE(t)
	s := newServerWith(t, func(s *server) {
		s.define("coder", map[string]string{"abi": "text", "program": gcProgram})
	})
	for _, n := range []string{"default", "temp-a", "temp-b", "e2e-x", "my-smoke", "keep-smoke", "notes", "ansi-bad", "install-old"} {
		s.send(n, "c-"+n, "hello "+n)
	}
	go s.request("coder", `{"op":"send","id":"live","session":"spark-live","input":"sleep"}`)
	eventually(t, 10*time.Second, "spark-live active", func() bool {
		b, _ := os.ReadFile(s.mnt(sessRel("spark-live") + "/state"))
		return string(b) == "active\n"
	})
	t.Cleanup(func() { s.request("coder", `{"op":"cancel","id":"live","session":"spark-live"}`) })
	s.send("repro-cur", "c-cur", "the current one")
	settle() // the derived files reach the store behind, before they are tampered with
	store := filepath.Join(s.store, coderRel, "session")
	testkit.Must(t, os.Remove(filepath.Join(store, "ansi-bad", "state")))
	testkit.Must(t, os.Symlink("/etc/hostname", filepath.Join(store, "ansi-bad", "state")))
	testkit.Must(t, os.Remove(filepath.Join(store, "install-old", "state")))
	testkit.Must(t, os.WriteFile(s.mnt(sessRel("index")+"/by-hash/h1"), []byte("temp-a\n"), 0o600))
	settle() // the index's list snapshot is on disk (written a second after a change)
	return s
}

// dryDefaults begins a dry run's header, with or without --pattern: the
// SPEC's line (12), which scripts read. Only a terminal is told the
// default patterns too (TestGCNamesDefaultsOnTerminal).
const dryDefaults = "ctx: dry-run; pass --yes to "

// TestGCPreviewWritesNothing: without --yes gc lists its candidates in
// name order, every protection applied, and the store does not change.
func TestGCPreviewWritesNothing(t *testing.T) {
	s := newGCServer(t)
	before := hostSnapshot(t, s.store)
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, dryDefaults + "archive\narchive e2e-x\narchive install-old\narchive keep-smoke\narchive my-smoke\narchive temp-a\narchive temp-b\n"},
		{[]string{"--keep", "keep-smoke", "--keep", "temp-b"}, dryDefaults + "archive\narchive e2e-x\narchive install-old\narchive my-smoke\narchive temp-a\n"},
		{[]string{"--pattern", "no*", "--pattern", "default"}, "ctx: dry-run; pass --yes to archive\narchive notes\n"},
		{[]string{"--older-than-days", "1"}, dryDefaults + "archive\n"},
		{[]string{"--delete"}, dryDefaults + "delete\ndelete e2e-x\ndelete install-old\ndelete keep-smoke\ndelete my-smoke\ndelete temp-a\ndelete temp-b\n"},
	} {
		out, code := s.ctx(t, append([]string{"agent", "session", "gc", "coder"}, c.args...)...)
		if out != c.want || code != 0 {
			t.Errorf("gc %v: exit %d\n%s\nwant\n%s", c.args, code, out, c.want)
		}
	}
	if diffs, _ := hostDiffs(before, hostSnapshot(t, s.store)); len(diffs) > 0 {
		t.Errorf("a preview wrote to the store: %v", diffs)
	}
}

// TestGCNamesDefaultsOnTerminal: on a terminal a dry run without
// --pattern names the default patterns (on stderr, before the SPEC's
// line), which no command line shows.
func TestGCNamesDefaultsOnTerminal(t *testing.T) {
	s := newFuseServer(t)
	s.send("temp-a", "c1", "hello")
	s.send("default", "c2", "the current one")
	shown, err := ctxOnTerminal(t, s, nil, "agent", "session", "gc", "coder")
	want := "ctx: gc: the default patterns *smoke* e2e-* repro-* install-* deterministic-* ansi-* spark-* temp-* (--pattern GLOB replaces them)\n" + dryDefaults + "archive\narchive temp-a\n"
	if err != nil || shown != want {
		t.Errorf("gc on a terminal: %v\n%s\nwant\n%s", err, shown, want)
	}
}

// TestGCArchivesWhole: --yes moves each candidate whole (byte for byte)
// to archived_sessions and takes it out of the index; protected sessions
// stay; a second archive of a name onto an existing target is EEXIST and
// leaves the live session as it was.
func TestGCArchivesWhole(t *testing.T) {
	s := newGCServer(t)
	sessions := filepath.Join(s.store, coderRel, "session")
	before := map[string]map[string]string{}
	for _, n := range []string{"e2e-x", "temp-a", "install-old"} {
		before[n] = treeContent(t, filepath.Join(sessions, n))
	}
	out, code := s.ctx(t, "agent", "session", "gc", "coder", "--keep", "keep-smoke", "--yes")
	want := "archived e2e-x\narchived install-old\narchived my-smoke\narchived temp-a\narchived temp-b\n"
	if out != want || code != 0 {
		t.Fatalf("gc --yes: exit %d\n%s\nlog:\n%s", code, out, s.logText())
	}
	archived := filepath.Join(s.store, "home/0", "archived_sessions", "coder")
	for n, tree := range before {
		if !maps.Equal(tree, treeContent(t, filepath.Join(archived, n))) {
			t.Errorf("%s: the archived tree differs from the live one", n)
		}
		if _, err := os.Lstat(filepath.Join(sessions, n)); !os.IsNotExist(err) {
			t.Errorf("%s still live: %v", n, err)
		}
	}
	list := s.readMnt(sessRel("index") + "/list")
	for _, n := range []string{"e2e-x", "temp-a", "temp-b", "my-smoke", "install-old"} {
		if strings.Contains("\n"+list, "\n"+n+"\n") {
			t.Errorf("%s is still in the list:\n%s", n, list)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(sessions, "index", "by-hash")); len(ents) != 0 {
		t.Errorf("the store keeps by-hash entries naming an archived session: %v", ents)
	}
	// The kernel's dentry of the entry goes by the notifier goroutine,
	// never waited for (fs/notify.go); in one CI run of many the stat
	// below came first and still found it. Bounded, it must go.
	eventually(t, afterClose, "the by-hash entry naming an archived session to go from the mount", func() bool {
		_, err := os.Stat(s.mnt(sessRel("index") + "/by-hash/h1"))
		return os.IsNotExist(err)
	})
	for _, n := range []string{"default", "repro-cur", "spark-live", "ansi-bad", "keep-smoke", "notes"} {
		if _, err := os.Stat(filepath.Join(sessions, n)); err != nil {
			t.Errorf("protected session %s: %v", n, err)
		}
	}
	if got := s.readMnt("home/0/archived_sessions/coder/temp-a/messages.jsonl"); !strings.Contains(got, "hello temp-a") {
		t.Errorf("the archive is not readable through the mount: %q", got)
	}
	// The same name again: the target exists.
	s.send("temp-a", "again", "a new temp-a")
	s.send("repro-cur", "c-cur2", "stay current")
	settle() // the derived files reach the store behind (an archive writes them first, refused or not)
	live := treeContent(t, filepath.Join(sessions, "temp-a"))
	out, code = s.ctx(t, "agent", "session", "archive", "coder", "temp-a")
	if code != 1 || out != "ctx: archive temp-a: EEXIST\n" {
		t.Errorf("archive onto an existing target: exit %d %q", code, out)
	}
	if !maps.Equal(live, treeContent(t, filepath.Join(sessions, "temp-a"))) {
		t.Errorf("a refused archive changed the live session")
	}
	// In a gc, the others proceed, and the exit status is 1.
	s.send("temp-c", "c-c", "a new one")
	s.send("repro-cur", "c-cur3", "stay current")
	settle()
	outs, errs, code := ctxSplit(t, s, "agent", "session", "gc", "coder", "--pattern", "temp-*", "--yes")
	if code != 1 || outs != "archived temp-c\n" || errs != "ctx: archive temp-a: EEXIST\n" {
		t.Errorf("gc with a target that exists: exit %d stdout %q stderr %q", code, outs, errs)
	}
	if !maps.Equal(live, treeContent(t, filepath.Join(sessions, "temp-a"))) {
		t.Errorf("a refused archive in a gc changed the live session")
	}
	if out, _ := s.fsck(); strings.Contains(out, "archived_sessions") { // ansi-bad's planted link is reported
		t.Errorf("fsck after archiving:\n%s", out)
	}
}

// TestArchiveRefusals: protected sessions are EBUSY and stay; an
// --archive-dir on another filesystem is EXDEV and copies nothing; bad
// --archive-dir uses are usage errors; --delete --yes deletes.
func TestArchiveRefusals(t *testing.T) {
	s := newGCServer(t)
	sessions := filepath.Join(s.store, coderRel, "session")
	// Each refusal says which protection keeps the session.
	for n, why := range map[string]string{
		"default":    "session default is never archived",
		"repro-cur":  "session repro-cur is the current session",
		"spark-live": "session spark-live has a run",
		"ansi-bad":   "session ansi-bad: its state cannot be read",
	} {
		tree := treeContent(t, filepath.Join(sessions, n))
		out, code := s.ctx(t, "agent", "session", "archive", "coder", n)
		if code != 1 || out != "ctx: archive "+n+": EBUSY: "+why+"\n" {
			t.Errorf("archive %s: exit %d %q", n, code, out)
		}
		if !maps.Equal(tree, treeContent(t, filepath.Join(sessions, n))) && n != "spark-live" {
			t.Errorf("a refused archive changed %s", n)
		}
	}
	tmp := t.TempDir()
	testkit.Must(t, unix.Mount("tmpfs", tmp, "tmpfs", 0, "size=1m"))
	t.Cleanup(func() { unix.Unmount(tmp, unix.MNT_DETACH) })
	tree := treeContent(t, filepath.Join(sessions, "temp-a"))
	out, code := s.ctx(t, "agent", "session", "gc", "coder", "--pattern", "temp-a", "--yes", "--archive-dir", tmp)
	if code != 1 || out != "ctx: archive temp-a: EXDEV\n" {
		t.Errorf("gc onto a tmpfs: exit %d %q", code, out)
	}
	if !maps.Equal(tree, treeContent(t, filepath.Join(sessions, "temp-a"))) {
		t.Errorf("EXDEV changed the live session")
	}
	if ents, _ := os.ReadDir(filepath.Join(tmp, "coder")); len(ents) != 0 {
		t.Errorf("something was copied to the other filesystem: %v", ents)
	}
	for _, args := range [][]string{
		{"--archive-dir", "relative/dir"},
		{"--archive-dir", tmp, "--delete"},
		{"--archive-dir", s.mnt(coderRel + "/session/sub")},
		{"--archive-dir", s.mnt(coderRel)},
	} {
		if out, code := s.ctx(t, append([]string{"agent", "session", "gc", "coder", "--yes"}, args...)...); code != 2 {
			t.Errorf("gc %v: exit %d, want 2: %s", args, code, out)
		}
	}
	out, code = s.ctx(t, "agent", "session", "gc", "coder", "--pattern", "temp-*", "--delete", "--yes")
	if code != 0 || out != "deleted temp-a\ndeleted temp-b\n" {
		t.Fatalf("delete: exit %d %q\n%s", code, out, s.logText())
	}
	for _, n := range []string{"temp-a", "temp-b"} {
		if _, err := os.Lstat(filepath.Join(sessions, n)); !os.IsNotExist(err) {
			t.Errorf("%s not deleted: %v", n, err)
		}
	}
	if ents, _ := os.ReadDir(sessions); strings.Contains(fmt.Sprint(ents), ".del-") {
		t.Errorf("a deletion left %v", ents)
	}
	// fsck names the planted state, and nothing else.
	if out, _ := s.fsck(); strings.Count(out, "\n") != 1 || !strings.Contains(out, "ansi-bad/state: a symlink") {
		t.Errorf("fsck after archive and delete:\n%s", out)
	}
}

// TestArchiveThroughTheMount: renameat2(RENAME_NOREPLACE) of a session to
// archived_sessions/<agent>/ archives it; any other rename stays EPERM.
func TestArchiveThroughTheMount(t *testing.T) {
	s := newGCServer(t)
	src := s.mnt(sessRel("notes"))
	testkit.Must(t, os.MkdirAll(s.mnt("home/0/archived_sessions/coder"), 0o700))
	dst := s.mnt("home/0/archived_sessions/coder/notes")
	testkit.WantErrno(t, "plain rename", os.Rename(src, dst), syscall.EPERM)
	testkit.WantErrno(t, "rename to another name", unix.Renameat2(unix.AT_FDCWD, src, unix.AT_FDCWD, dst+"2", unix.RENAME_NOREPLACE), syscall.EPERM)
	testkit.Must(t, unix.Renameat2(unix.AT_FDCWD, src, unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE))
	if _, err := os.Stat(src); !os.IsNotExist(err) {
		t.Errorf("the session is still live: %v", err)
	}
	if got := s.readMnt("home/0/archived_sessions/coder/notes/messages.jsonl"); !strings.Contains(got, "hello notes") {
		t.Errorf("archived messages: %q", got)
	}
	if strings.Contains(s.readMnt(sessRel("index")+"/list"), "notes\n") {
		t.Errorf("notes is still listed")
	}
	src = s.mnt(sessRel("default"))
	testkit.WantErrno(t, "archive of default", unix.Renameat2(unix.AT_FDCWD, src, unix.AT_FDCWD, s.mnt("home/0/archived_sessions/coder/default"), unix.RENAME_NOREPLACE), syscall.EBUSY)
}

// TestArchiveRacesWithSends: sends to a session while it is archived
// either land before the move (and are archived with it) or are refused;
// no half session is ever left, and fsck stays clean.
func TestArchiveRacesWithSends(t *testing.T) {
	requireFUSE(t)
	s := newServerWith(t, func(s *server) { s.define("coder", map[string]string{"abi": "text", "program": gcProgram}) })
	sessions := filepath.Join(s.store, coderRel, "session")
	for round := 0; round < 10; round++ {
		name := fmt.Sprintf("temp-%d", round)
		s.send(name, "first", "first")
		s.send("default", fmt.Sprintf("cur-%d", round), "keep default current")
		var wg sync.WaitGroup
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				s.request("coder", fmt.Sprintf(`{"op":"send","id":"r%d","session":%q,"input":"racing"}`, i, name))
			}(i)
		}
		s.ctx(t, "agent", "session", "archive", "coder", name)
		wg.Wait()
		// What is left live, if anything, is a whole session.
		if ents, err := os.ReadDir(filepath.Join(sessions, name)); err == nil {
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			sort.Strings(names)
			if !strings.Contains(strings.Join(names, " "), "messages.jsonl") || !strings.Contains(strings.Join(names, " "), "state") {
				t.Fatalf("round %d: a half session was left: %v", round, names)
			}
		}
	}
	if out, code := s.fsck(); code != 0 {
		t.Errorf("fsck after racing archives:\n%s", out)
	}
}

// TestDeleteDeepContext: a user's context/ filled as deep as a path can
// name where the session lives is deeper than that once the session is
// moved aside to be deleted (".del-<name>-<16 hex>" is longer than the
// name). The removal walked by paths: ENAMETOOLONG half way, the session
// gone from view but still in index/list, its delete refused. It is
// deleted whole now, and leaves nothing.
func TestDeleteDeepContext(t *testing.T) {
	s := newFuseServer(t)
	u := &cred{uid: 1001, gid: 1001}
	s.sendAs(u, "temp-deep", "c1", "", "hello")
	s.sendAs(u, "keep", "c2", "", "hello")
	agent := "home/1001/agent/coder/session/"
	// As deep as the store lets the user go: names of 200 bytes, then of 1.
	script := `cd "$1" || exit 1
n=$(printf 'd%.0s' $(seq 200))
while mkdir "$n" 2>/dev/null; do cd "$n"; done
while mkdir x 2>/dev/null; do cd x; done
echo data >../f && echo ok`
	if out, err := runCmd(t, u, nil, "/bin/bash", "-c", script, "bash", s.mnt(agent+"temp-deep/context")); err != nil || out != "ok\n" {
		t.Fatalf("deep tree: %v %q", err, out)
	}
	frames, raw, err := s.requestAs(u, "coder", `{"op":"archive","session":"temp-deep","delete":true}`)
	if err != nil || len(frames) != 1 || frames[0]["type"] != "deleted" {
		t.Errorf("delete: %v %s", err, raw)
	}
	if ents, _ := os.ReadDir(filepath.Join(s.store, agent)); len(ents) != 2 {
		t.Errorf("the store's sessions after the delete: %v, want index and keep", ents)
	}
	if list, err := bashAs(t, u, "cat "+s.mnt(agent+"index/list")); list != "keep\n" {
		t.Errorf("index/list after the delete: %v %q", err, list)
	}
}

// TestArchiveSharedRefused: a shared space's session is not archived
// (archived sessions live in a home, SPEC 2): `ctx agent session archive
// --shared` and `gc --yes --shared` are EINVAL, saying so, and write
// nothing; `--delete` works there.
func TestArchiveSharedRefused(t *testing.T) {
	s := newFuseServer(t)
	s.spaceAdd("team", 1234)
	a := member(1001, 1234)
	extra := `,"scope":"shared","space":"team"`
	s.sendAs(a, "e2e-1", "q1", extra, "hello")
	s.sendAs(a, "e2e-2", "q2", extra, "hello")
	before := storeSnapshot(t, s)
	for _, args := range [][]string{
		{"archive", "coder", "e2e-1", "--shared", "team"},
		{"gc", "coder", "--pattern", "e2e-1", "--yes", "--shared", "team"},
	} {
		out, errs, code := ctxSplitAs(t, s, a, append([]string{"agent", "session"}, args...)...)
		if code != 1 || !strings.HasPrefix(errs, "ctx: archive e2e-1: EINVAL: ") || !strings.Contains(errs, "--delete") {
			t.Errorf("%v: exit %d\n%s%s, want EINVAL", args, code, out, errs)
		}
	}
	testkit.Same(t, "the store after refused archives", before, storeSnapshot(t, s))
	if out, errs, code := ctxSplitAs(t, s, a, "agent", "session", "gc", "coder", "--pattern", "e2e-1", "--delete", "--yes", "--shared", "team"); code != 0 || out != "deleted e2e-1\n" {
		t.Errorf("delete in the space: exit %d\n%s%s", code, out, errs)
	}
}
