package integration

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// storedOwners checks every directory and regular file below the store's
// dir (a home or a space): history must be root's, closed to users (no
// group or other bits), and what lies in a free tree (root/, context/)
// the user's.
func storedOwners(t testing.TB, dir string, user uint32) {
	t.Helper()
	n := 0
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !(d.IsDir() || d.Type().IsRegular()) {
			return err
		}
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		sys := st.Sys().(*syscall.Stat_t)
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		free := inFreeTree(rel)
		switch {
		case free && sys.Uid != user:
			t.Errorf("%s (a free tree): owner %d, want %d", rel, sys.Uid, user)
		case !free && (sys.Uid != 0 || st.Mode().Perm()&0o077 != 0):
			t.Errorf("%s (history): owner %d mode %v, want root's and closed to users", rel, sys.Uid, st.Mode().Perm())
		}
		n++
		return nil
	})
	if n < 10 {
		t.Fatalf("only %d entries under %s", n, dir)
	}
}

// inFreeTree says whether rel (below a home) is an agent's root/ or a
// session's context/, or in one.
func inFreeTree(rel string) bool {
	parts := strings.Split(rel, string(filepath.Separator))
	for i, p := range parts {
		if (p == "root" && i == 2 && parts[0] == "agent") || (p == "context" && i == 4) {
			return true
		}
	}
	return false
}

// shownAs is `stat -c '%u %g %a'` of paths through the mount, run as c.
func shownAs(t testing.TB, c *cred, paths ...string) []string {
	t.Helper()
	out, err := runCmd(t, c, nil, "stat", append([]string{"-c", "%u %g %a"}, paths...)...)
	if err != nil {
		t.Fatalf("stat as %s: %v\n%s", credName(c), err, out)
	}
	return strings.Split(strings.TrimSpace(out), "\n")
}

// TestHistoryOwnedByRoot: issue 19, finding 4. After sends, every file and
// directory of uid 1001's history in the store is root's with no group or
// other bits, so that a path into the store gives the user nothing, while
// the mount shows them as 1001's, 0700 and 0600, and the free trees stay
// 1001's. A store of the older layout (history the user's) is migrated at
// mount, and fsck is clean.
func TestHistoryOwnedByRoot(t *testing.T) {
	requireFUSE(t)
	s := newFuseServer(t)
	s.sendAs(uid1001, "a", "a1", "", "hello")
	sess := s.mnt(uid1001CoderAt + "a")
	if out, err := bashAs(t, uid1001, "echo note > "+sess+"/context/note && mkdir "+s.mnt("home/1001/agent/coder/root/work")); err != nil {
		t.Fatalf("writing the free trees as 1001: %v\n%s", err, out)
	}
	settle()
	home := filepath.Join(s.store, "home", "1001")
	storedOwners(t, home, 1001)
	if st, err := os.Stat(home); err != nil || st.Sys().(*syscall.Stat_t).Uid != 0 || st.Mode().Perm() != 0o700 {
		t.Errorf("the home in the store: %v %v, want root's 0700", st.Mode(), err)
	}
	want := []string{"1001 1001 700", "1001 1001 700", "1001 1001 600", "1001 1001 600", "1001 1001 700", "1001 1001 644"}
	got := shownAs(t, uid1001, s.mnt("home/1001"), sess, sess+"/messages.jsonl", sess+"/state", sess+"/context", sess+"/context/note")
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("through the mount as 1001: %q, want %q", got, want)
	}
	if out, err := runCmd(t, uid1001, nil, "cat", sess+"/messages.jsonl"); err != nil || !strings.Contains(out, "hello") {
		t.Errorf("1001 reading its log through the mount: %v\n%s", err, out)
	}
	if out, code := s.fsck(); code != 0 {
		t.Errorf("fsck: exit %d\n%s", code, out)
	}

	t.Run("shared", func(t *testing.T) {
		s.spaceAdd("team", 1234)
		s.sendAs(member(1001, 1234), "t", "t1", `,"scope":"shared","space":"team"`, "hello team")
		settle()
		storedOwners(t, filepath.Join(s.store, "shared", "team"), 1001)
		st := "shared/team/agent/coder/session/t"
		got := shownAs(t, member(1002, 1234), s.mnt(st), s.mnt(st+"/messages.jsonl"))
		if !strings.HasPrefix(got[0], "0 1234 ") || !strings.HasSuffix(got[0], "770") || got[1] != "0 1234 660" {
			t.Errorf("a shared session through the mount: %q, want the space's group with the owner's bits", got)
		}
		if out, err := runCmd(t, member(1002, 1234), nil, "cat", s.mnt(st+"/messages.jsonl")); err != nil || !strings.Contains(out, "hello team") {
			t.Errorf("another member reading the shared log: %v\n%s", err, out)
		}
		if out, err := runCmd(t, &cred{uid: 1003, gid: 1003}, nil, "cat", s.mnt(st+"/messages.jsonl")); err == nil {
			t.Errorf("a stranger read the shared log:\n%s", out)
		}
	})

	t.Run("migrated", func(t *testing.T) {
		s.kill(s.cmd, syscall.SIGTERM)
		// The store as an older ctxfs left it: history the user's.
		testkit.Must(t, os.Remove(filepath.Join(s.store, ".ctxfs", "history-owned")))
		filepath.WalkDir(home, func(p string, d fs.DirEntry, err error) error {
			if err == nil && (d.IsDir() || d.Type().IsRegular()) {
				testkit.Must(t, os.Lchown(p, 1001, 1001))
			}
			return err
		})
		s.start()
		storedOwners(t, home, 1001)
		s.sendAs(uid1001, "a", "a2", "", "again")
		got := shownAs(t, uid1001, sess+"/messages.jsonl")
		if got[0] != "1001 1001 600" {
			t.Errorf("the migrated log through the mount: %q", got)
		}
		if out, code := s.fsck(); code != 0 {
			t.Errorf("fsck after the migration: exit %d\n%s", code, out)
		}
	})
}
