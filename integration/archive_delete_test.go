package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestDeleteArchivedAsOwner: archived sessions count in their home's
// bytes of history (CTXFS_LIMITS logbytes), and no user could delete one
// (only root, by hand in the store), so a user at the bound through their
// archives was refused EDQUOT at every send until root acted. The owner
// deletes an archived session now (ctx agent session delete-archived,
// op archive with "archived":true): it is gone whole, its bytes are given
// back exactly, and a send refused EDQUOT before succeeds after. Another
// uid is refused EACCES (naming the home) or ENOENT (its own home has
// none), a missing name is ENOENT, a bad one EINVAL, a shared space's
// EINVAL, a dry run writes nothing; each refusal leaves the store as it
// was, and the archive stays read only to rm. The live sessions' index is
// not touched.
func TestDeleteArchivedAsOwner(t *testing.T) {
	const bound = 32768
	s := limitedServer(t, fmt.Sprintf("logbytes=%d", bound), nil)
	s.sendAs(uid1001, "old", "q1", "", strings.Repeat("x", 4000))
	s.sendAs(uid1001, "live", "q2", "", "hello") // the current session: old may be archived
	s.sendAs(uid1002, "b", "q3", "", "hello")
	if out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "session", "archive", "coder", "old"); code != 0 {
		t.Fatalf("archive old: exit %d\n%s%s", code, out, errs)
	}
	archived := filepath.Join(s.store, "home/1001/archived_sessions/coder/old")
	held := storeHistory(t, s, 1001)
	archiveBytes := sessionHistory(t, archived)
	if archiveBytes < 4000 {
		t.Fatalf("the archived session holds %d bytes of history", archiveBytes)
	}
	// full brings the home to its bound, to the byte, by one line that
	// fills what is left, and checks that a send is refused there.
	fills := 0
	full := func(held int64) {
		t.Helper()
		fills++
		log := s.mnt("home/1001/agent/coder/session/live/messages.jsonl")
		if out, err := runCmd(t, uid1001, nil, "/usr/bin/python3", "-c", appendErrno, log, stampedLine(int(bound-held))); err != nil || strings.TrimSpace(out) != "ok" {
			t.Fatalf("filling the bound: %v %s", err, out)
		}
		if got := storeHistory(t, s, 1001); got != bound {
			t.Fatalf("the home holds %d bytes of history, want %d", got, bound)
		}
		if frames, raw, err := s.requestAs(uid1001, "coder", fmt.Sprintf(`{"op":"send","id":"over-%d","session":"live","input":"hi"}`, fills)); err != nil || len(frames) != 1 || frames[0]["code"] != "EDQUOT" {
			t.Fatalf("a send at the bound: %v %s, want EDQUOT", err, raw)
		}
	}
	full(held)
	withArchive := storeHistory(t, s, 1001)
	waitListsWritten(t, s, "home/1001/agent/coder/session", "home/1002/agent/coder/session")
	index := snapshot(t, filepath.Join(s.store, "home/1001/agent/coder/session/index"))

	// Refusals: each changes nothing in the store.
	before := storeSnapshot(t, s)
	refused := func(c *cred, line, want string) {
		t.Helper()
		frames, raw, err := s.requestAs(c, "coder", line)
		if err != nil || len(frames) != 1 || frames[0]["type"] != "error" || frames[0]["code"] != want {
			t.Errorf("%s as %s: %v %s, want %s", line, credName(c), err, raw, want)
		}
	}
	refused(uid1002, `{"op":"archive","session":"old","delete":true,"archived":true,"uid":1001}`, "EACCES")
	refused(uid1002, `{"op":"archive","session":"old","dry_run":true,"archived":true,"uid":1001}`, "EACCES")
	refused(uid1002, `{"op":"archive","session":"old","delete":true,"archived":true}`, "ENOENT")
	refused(uid1001, `{"op":"archive","session":"nosuch","delete":true,"archived":true}`, "ENOENT")
	refused(uid1001, `{"op":"archive","session":"../old","delete":true,"archived":true}`, "EINVAL")
	refused(uid1001, `{"op":"archive","session":"old","archived":true}`, "EINVAL")
	refused(uid1001, `{"op":"archive","session":"old","delete":true,"archived":true,"scope":"shared","space":"team"}`, "EINVAL")
	for _, c := range []struct {
		who  *cred
		args []string
		code int
		err  string
	}{
		{uid1002, []string{"old", "--uid", "1001", "--yes"}, 1, "ctx: delete old: EACCES"},
		{uid1002, []string{"old", "--yes"}, 1, "ctx: delete old: ENOENT"},
		{uid1001, []string{"nosuch", "--yes"}, 1, "ctx: delete nosuch: ENOENT"},
		{uid1001, []string{"../old", "--yes"}, 2, "EINVAL"},
		{uid1001, []string{"old", "--shared", "team", "--yes"}, 2, ""},
	} {
		out, errs, code := ctxSplitAs(t, s, c.who, append([]string{"agent", "session", "delete-archived", "coder"}, c.args...)...)
		if code != c.code || !strings.Contains(errs, c.err) || out != "" {
			t.Errorf("delete-archived %v as %s: exit %d, want %d and %q\nstdout: %s\nstderr: %s", c.args, credName(c.who), code, c.code, c.err, out, errs)
		}
	}
	if out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "session", "delete-archived", "coder", "old"); code != 0 || out != "ctx: dry-run; pass --yes to delete\ndelete old\n" {
		t.Errorf("delete-archived without --yes: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	// Through the mount the archive stays read only: no rm of a file of
	// it, nor of the whole (which rm does file by file).
	arch := s.mnt("home/1001/archived_sessions/coder/old")
	for _, cmd := range []string{"rm -f " + arch + "/messages.jsonl", "rm -rf " + arch, "rmdir " + arch} {
		if out, err := bashAs(t, uid1001, cmd); err == nil {
			t.Errorf("%s as uid 1001: %q, want a refusal", cmd, out)
		}
	}
	if out, err := bashAs(t, uid1002, "rm -rf "+arch); err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("rm -rf of uid 1001's archive as uid 1002: %v %q, want EACCES", err, out)
	}
	testkit.Same(t, "the store after refusals", before, storeSnapshot(t, s))
	if got := storeHistory(t, s, 1001); got != withArchive {
		t.Errorf("after refusals the home holds %d bytes of history, want %d", got, withArchive)
	}

	// The owner deletes it: whole, its bytes given back, a send fits.
	out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "session", "delete-archived", "coder", "old", "--yes")
	if code != 0 || out != "deleted old\n" || errs != "" {
		t.Fatalf("delete-archived old --yes: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	if _, err := os.Lstat(archived); !os.IsNotExist(err) {
		t.Errorf("the archived session after its delete: %v, want ENOENT", err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(archived)); len(ents) != 0 {
		t.Errorf("the delete left %v in archived_sessions/coder", ents)
	}
	if _, err := os.Lstat(arch); !os.IsNotExist(err) {
		t.Errorf("the archived session through the mount: %v, want ENOENT", err)
	}
	if got := storeHistory(t, s, 1001); got != withArchive-archiveBytes {
		t.Errorf("after the delete the home holds %d bytes of history, want %d", got, withArchive-archiveBytes)
	}
	testkit.Same(t, "the live sessions' index", index, snapshot(t, filepath.Join(s.store, "home/1001/agent/coder/session/index")))
	s.sendAs(uid1001, "live", "over-1", "", "hi") // refused at the bound: the same id sent again
	if out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "session", "delete-archived", "coder", "old", "--yes"); code != 1 || !strings.Contains(errs, "ctx: delete old: ENOENT") {
		t.Errorf("a second delete: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}

	// Root deletes an archive of uid 1001's home, naming it (--uid), and
	// the bytes go back to uid 1001.
	s.sendAs(uid1001, "old", "q4", "", "again")
	s.sendAs(uid1001, "live", "q5", "", "hello")
	if out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "session", "archive", "coder", "old"); code != 0 {
		t.Fatalf("archive old again: exit %d\n%s%s", code, out, errs)
	}
	held, archiveBytes = storeHistory(t, s, 1001), sessionHistory(t, archived)
	full(held)
	if out, code := s.ctx(t, "agent", "session", "delete-archived", "coder", "old", "--uid", "1001", "--yes"); code != 0 || out != "deleted old\n" {
		t.Fatalf("root's delete-archived --uid 1001: exit %d\n%s", code, out)
	}
	if got := storeHistory(t, s, 1001); got != bound-archiveBytes {
		t.Errorf("after root's delete the home holds %d bytes of history, want %d", got, bound-archiveBytes)
	}
	s.sendAs(uid1001, "live", "then", "", "hi")
}

// TestDeleteArchivedLeftover: a delete of an archived session
// interrupted between its move aside and its removal leaves a hidden
// .del-<name>-<hex> in archived_sessions/<agent>/: fsck counts it as a
// leftover (fsck named it "not a name the store holds here", a problem),
// fsck --repair removes it, and so does the uid's first count of history
// after a start.
func TestDeleteArchivedLeftover(t *testing.T) {
	s := newFuseServer(t)
	s.sendAs(uid1001, "old", "q1", "", "hello")
	s.sendAs(uid1001, "live", "q2", "", "hello")
	if out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "session", "archive", "coder", "old"); code != 0 {
		t.Fatalf("archive old: exit %d\n%s%s", code, out, errs)
	}
	dir := filepath.Join(s.store, "home/1001/archived_sessions/coder")
	plant := func() string {
		t.Helper()
		left := filepath.Join(dir, ".del-gone-0123456789abcdef")
		if out, err := exec.Command("cp", "-a", filepath.Join(dir, "old"), left).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v %s", err, out)
		}
		return left
	}
	s.kill(s.cmd, syscall.SIGTERM)
	left := plant()
	if out, code := s.fsck(); code != 0 {
		t.Errorf("fsck of a store with a leftover deletion: exit %d\n%s", code, out)
	}
	if out, code := s.fsck("--repair"); code != 0 || !strings.Contains(out, "leftover directory of an interrupted deletion of an archived session") {
		t.Errorf("fsck --repair: exit %d\n%s", code, out)
	}
	if _, err := os.Lstat(left); !os.IsNotExist(err) {
		t.Errorf("the leftover after fsck --repair: %v", err)
	}
	plant()
	s.start()
	s.sendAs(uid1001, "live", "q3", "", "hello") // counts uid 1001's history
	if _, err := os.Lstat(left); !os.IsNotExist(err) {
		t.Errorf("the leftover after a start and a send: %v", err)
	}
	if out, code := s.fsck(); code != 0 || out != "clean\n" {
		t.Errorf("fsck: exit %d\n%s", code, out)
	}
}
