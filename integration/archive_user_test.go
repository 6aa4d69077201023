package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestArchiveAsUser: a user archives a session of their own home with
// `ctx agent session archive`, which makes archived_sessions/<agent>/
// through the mount and renames the session into it (SPEC 12, README
// "How archive and GC move a session"). The archive's directories were
// shown without write bits, so the kernel refused the user's mkdir of
// archived_sessions/<agent> (EACCES) and the rename into it, and only
// root could archive.
func TestArchiveAsUser(t *testing.T) {
	s := newFuseServer(t)
	s.sendAs(uid1001, "temp-a", "c1", "", "hello")
	s.sendAs(uid1001, "keep", "c2", "", "hello")
	out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "session", "archive", "coder", "temp-a")
	if code != 0 {
		t.Fatalf("archive as uid 1001: exit %d\n%s%s", code, out, errs)
	}
	if _, err := os.Stat(filepath.Join(s.store, "home/1001/archived_sessions/coder/temp-a/messages.jsonl")); err != nil {
		t.Errorf("the archived session in the store: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.store, "home/1001/agent/coder/session/temp-a")); !os.IsNotExist(err) {
		t.Errorf("the live session after its archive: %v, want ENOENT", err)
	}
	// The archive's directories now show write bits; every other name made
	// there is still the engine's EPERM, and nothing is written.
	arch := s.mnt("home/1001/archived_sessions/coder")
	before := storeSnapshot(t, s)
	for _, cmd := range []string{
		"touch " + arch + "/x", "mkdir " + arch + "/x", "ln -s y " + arch + "/x", "mkfifo " + arch + "/x",
		"touch " + s.mnt("home/1001/archived_sessions/x"), "mkdir " + arch + "/temp-a/x",
		"rmdir " + arch + "/temp-a", "mv " + arch + "/temp-a " + arch + "/temp-b",
		"mv " + arch + "/temp-a " + s.mnt("home/1001/agent/coder/session/temp-b"),
	} {
		out, err := bashAs(t, uid1001, cmd)
		if err == nil || !strings.Contains(out, "Operation not permitted") && !strings.Contains(out, "Permission denied") && !strings.Contains(out, "Directory not empty") {
			t.Errorf("%s as uid 1001 in its archive: %v %q, want a refusal", cmd, err, out)
		}
	}
	testkit.Same(t, "the store after refusals in the archive", before, storeSnapshot(t, s))
}

// TestArchiveRefusedMakesNothing: an archive the server refuses (EBUSY:
// a protected session) leaves no archived_sessions/<agent>/ behind: the
// client made it through the mount before the rename, and no user can
// remove it there (rmdir of the ABI's directories is EPERM).
func TestArchiveRefusedMakesNothing(t *testing.T) {
	s := newFuseServer(t)
	s.sendAs(uid1001, "default", "c1", "", "hello")
	before := storeSnapshot(t, s)
	out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "session", "archive", "coder", "default")
	if code == 0 || !strings.Contains(errs, "EBUSY") {
		t.Fatalf("archive of default as uid 1001: exit %d\n%s%s, want EBUSY", code, out, errs)
	}
	if _, err := os.Lstat(filepath.Join(s.store, "home/1001/archived_sessions/coder")); !os.IsNotExist(err) {
		t.Errorf("archived_sessions/coder after a refused archive: %v, want ENOENT", err)
	}
	testkit.Same(t, "the store after a refused archive", before, storeSnapshot(t, s))
}

// TestDeleteFailingLateLeavesNoIndex: a delete whose removal fails once
// the session was moved aside (here a file root made immutable in its
// context/; an I/O error, a shut gate or the descriptor walk's check of
// ".." alike) reports the failure, and the session, gone from view, is
// gone from the index too: the error was returned before the index was
// cleaned, and index/list went on naming a session that was not there.
func TestDeleteFailingLateLeavesNoIndex(t *testing.T) {
	s := newFuseServer(t)
	s.sendAs(uid1001, "gone", "c1", "", "hello")
	if out, err := bashAs(t, uid1001, "echo x > "+s.mnt("home/1001/agent/coder/session/gone/context/f")); err != nil {
		t.Fatalf("writing context/f: %v %s", err, out)
	}
	s.sendAs(uid1001, "keep", "c2", "", "hello") // the current session now
	sessions := filepath.Join(s.store, "home/1001/agent/coder/session")
	if out, err := exec.Command("chattr", "+i", filepath.Join(sessions, "gone/context/f")).CombinedOutput(); err != nil {
		t.Fatalf("chattr +i (the test needs a store on a filesystem with inode flags, as ext4): %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("chattr", "-R", "-i", sessions).Run() })
	out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "session", "gc", "coder", "--pattern", "gone", "--delete", "--yes")
	if code == 0 {
		t.Errorf("a delete that could not remove the session: exit 0\n%s%s", out, errs)
	}
	if _, err := os.Lstat(filepath.Join(sessions, "gone")); !os.IsNotExist(err) {
		t.Fatalf("the session after its delete: %v, want it moved aside", err)
	}
	if list := s.readMnt("home/1001/agent/coder/session/index/list"); strings.Contains("\n"+list, "\ngone\n") {
		t.Errorf("index/list names the deleted session:\n%s", list)
	}
}

// TestGCOlderThanUnknownAge: `gc --older-than-days` judges a session by
// its newest file; one it cannot look into (a member of a shared space
// mounted a FUSE filesystem of theirs over it, which refuses everyone
// else EACCES) was taken as infinitely old, so another member's gc
// offered to archive or delete a session sent to a minute before. It is
// passed over now, and stderr says why.
func TestGCOlderThanUnknownAge(t *testing.T) {
	s := newFuseServer(t)
	s.spaceAdd("team", 1234)
	alice, bob := &cred{uid: 1001, gid: 1001, groups: []uint32{1234}}, &cred{uid: 1002, gid: 1002, groups: []uint32{1234}}
	shared := `,"scope":"shared","space":"team"`
	s.sendAs(bob, "temp-new", "b1", shared, "hello")
	s.sendAs(bob, "temp-seen", "b2", shared, "hello")
	userFUSE(t, alice, s.mnt("shared/team/agent/coder/session/temp-new"), "hangfs")
	out, errs, code := ctxSplitAs(t, s, bob, "agent", "session", "gc", "coder", "--shared", "team", "--older-than-days", "1")
	if strings.Contains(out, "temp-new") || code != 0 || !strings.Contains(errs, "temp-new") {
		t.Errorf("gc --older-than-days 1 of a session it cannot look into: exit %d\nstdout:\n%sstderr:\n%s", code, out, errs)
	}
	if strings.Contains(out, "temp-seen") {
		t.Errorf("gc --older-than-days 1 took a session sent to now:\n%s", out)
	}
	t.Logf("stderr: %s", errs)
}

// TestGCOlderThanDays: --older-than-days takes a session whose newest
// file is older than that (SPEC 12), and passes over one with a newer
// file; times set through the mount are the ones gc reads.
func TestGCOlderThanDays(t *testing.T) {
	s := newFuseServer(t)
	for _, n := range []string{"temp-old", "temp-recent", "default"} {
		s.send(n, "c-"+n, "hello")
	}
	settle() // the derived files reach the store behind: no later write moves their times
	old := time.Now().Add(-72 * time.Hour)
	for _, n := range []string{"temp-old", "temp-recent"} {
		dir := s.mnt(sessRel(n))
		ents, err := os.ReadDir(dir)
		testkit.Must(t, err)
		for _, e := range ents {
			if n == "temp-recent" && e.Name() == "cwd" {
				continue // one newer file keeps the session
			}
			testkit.Must(t, os.Chtimes(filepath.Join(dir, e.Name()), old, old))
		}
		testkit.Must(t, os.Chtimes(dir, old, old))
	}
	for days, want := range map[string]string{"2": "archive temp-old\n", "4": ""} {
		out, code := s.ctx(t, "agent", "session", "gc", "coder", "--older-than-days", days)
		if code != 0 || out != dryDefaults+"archive\n"+want {
			t.Errorf("gc --older-than-days %s: exit %d\n%s\nwant\n%s", days, code, out, dryDefaults+"archive\n"+want)
		}
	}
}

// TestArchiveDirThroughSymlink: an --archive-dir that reaches the live
// session tree through a symlink overlaps it as the path itself would
// (SPEC 12: exit 2) and writes nothing. It was taken: ctx's mkdir of
// DIR/coder made a new session named coder in the live tree (listed in
// the index), the rename was EPERM, and the session stayed.
func TestArchiveDirThroughSymlink(t *testing.T) {
	s := newFuseServer(t)
	s.send("temp-a", "c1", "hello")
	s.send("default", "c2", "the current one")
	settle() // the derived files reach the store
	links := t.TempDir()
	for link, to := range map[string]string{"sessions": coderRel + "/session", "agent": coderRel + "/session/.."} {
		testkit.Must(t, os.Symlink(s.mnt(to), filepath.Join(links, link)))
	}
	before := hostSnapshot(t, s.store)
	for _, dir := range []string{filepath.Join(links, "sessions"), filepath.Join(links, "sessions", "deeper"), filepath.Join(links, "agent")} {
		for _, cmd := range [][]string{{"gc", "coder", "--pattern", "temp-a", "--yes"}, {"archive", "coder", "temp-a"}} {
			args := append(append([]string{"agent", "session"}, cmd...), "--archive-dir", dir)
			if out, code := s.ctx(t, args...); code != 2 || !strings.Contains(out, "overlaps the live sessions") {
				t.Errorf("%v: exit %d %q, want 2 (overlaps)", args[2:], code, out)
			}
		}
	}
	storeUnchanged(t, "an --archive-dir through a symlink", before, hostSnapshot(t, s.store))
}

// TestArchiveDirOfAgentsOnly: a user's mkdir of archived_sessions/<agent>
// (the target ctx makes before its rename) is taken only for an agent of
// the home: any other name is ENOENT and writes nothing. Any valid name
// was taken until 2026-12-05, each an empty directory of root's store,
// without a bound (300 made by uid 1001 in a loop).
func TestArchiveDirOfAgentsOnly(t *testing.T) {
	s := limitedServer(t, "names=100", nil)
	s.sendAs(uid1001, "a", "q1", "", "hello")
	arch := s.mnt("home/1001/archived_sessions")
	for _, d := range []string{arch, arch + "/coder"} {
		if out, err := bashAs(t, uid1001, "mkdir "+d); err != nil {
			t.Fatalf("mkdir %s as uid 1001: %v %q", d, err, out)
		}
	}
	before := storeSnapshot(t, s)
	for d, want := range map[string]string{"coder": "File exists", "other": "No such file or directory", "x1": "No such file or directory"} {
		if out, err := bashAs(t, uid1001, "mkdir "+arch+"/"+d); err == nil || !strings.Contains(out, want) {
			t.Errorf("mkdir archived_sessions/%s as uid 1001: %v %q, want %s", d, err, out, want)
		}
	}
	testkit.Same(t, "the store after refused mkdirs", before, storeSnapshot(t, s))
}
