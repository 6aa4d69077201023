package integration

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestSharedIndexOtherMember: in a space made by `ctxfs space add` and in
// one made by mkdir+chgrp+chmod through the mount, uid 1001 (a member by
// its supplementary groups) starts a shared session over the socket; uid
// 1002, another member, then reads index/list and index/current through
// the mount, creates index/by-hash/<key> naming the session and moves
// current, and uid 1001 sees what 1002 wrote. In the store, everything
// the members made in the space but its free trees is root's history in
// the space's group, closed (0700 directories, 0600 files; the mount
// shows the group read-write modes), and fsck is clean.
func TestSharedIndexOtherMember(t *testing.T) {
	s := newFuseServer(t)
	s.spaceAdd("team", 1234)
	space2 := s.mnt("shared/team2")
	testkit.Must(t, os.Mkdir(space2, 0o770))
	testkit.Must(t, os.Chown(space2, 0, 1235))
	testkit.Must(t, os.Chmod(space2, 0o2770))
	spaces := []struct {
		name  string
		group uint32
	}{{"team", 1234}, {"team2", 1235}}
	for _, sp := range spaces {
		first, second := member(1001, sp.group), member(1002, sp.group)
		extra := fmt.Sprintf(`,"scope":"shared","space":%q`, sp.name)
		idx := s.mnt("shared/" + sp.name + "/agent/coder/session/index")
		s.sendAs(first, "t1", "c1", extra, "hello team")

		if out, err := bashAs(t, second, "cat "+idx+"/list"); err != nil || !strings.Contains(out, "t1\n") {
			t.Errorf("%s: uid 1002 reads index/list: %v %q", sp.name, err, out)
		}
		if out, err := bashAs(t, second, "cat "+idx+"/current"); err != nil || out != "t1\n" {
			t.Errorf("%s: uid 1002 reads index/current: %v %q, want \"t1\\n\"", sp.name, err, out)
		}
		if out, err := bashAs(t, second, "printf 't1\\n' > "+idx+"/by-hash/k1 && cat "+idx+"/by-hash/k1 && ls "+idx+"/by-hash"); err != nil || out != "t1\nk1\n" {
			t.Errorf("%s: uid 1002 creates index/by-hash/k1: %v %q", sp.name, err, out)
		}
		if out, err := bashAs(t, first, "cat "+idx+"/by-hash/k1"); err != nil || out != "t1\n" {
			t.Errorf("%s: uid 1001 reads the by-hash entry uid 1002 made: %v %q", sp.name, err, out)
		}
		s.sendAs(second, "t2", "c2", extra, "from 1002")
		if out, err := bashAs(t, second, "printf 't1\\n' > "+idx+"/current && cat "+idx+"/current"); err != nil || out != "t1\n" {
			t.Errorf("%s: uid 1002 moves index/current: %v %q", sp.name, err, out)
		}
		if out, err := bashAs(t, first, "cat "+idx+"/list "+idx+"/current"); err != nil || !strings.Contains(out, "t1\n") || !strings.Contains(out, "t2\n") || !strings.HasSuffix(out, "t1\n") {
			t.Errorf("%s: uid 1001 reads list and current after uid 1002: %v %q", sp.name, err, out)
		}
		// What a member makes in a free tree of the space keeps the
		// space's group (its directories pass it on), as on any setgid
		// directory; its mode is the member's own choice.
		ctxDir := s.mnt("shared/" + sp.name + "/agent/coder/session/t1/context")
		if out, err := bashAs(t, first, "mkdir "+ctxDir+"/d && echo x > "+ctxDir+"/d/notes && stat -c %g "+ctxDir+"/d "+ctxDir+"/d/notes"); err != nil || out != fmt.Sprintf("%d\n%d\n", sp.group, sp.group) {
			t.Errorf("%s: a member's files in context/: %v group %q, want %d", sp.name, err, out, sp.group)
		}
		// A uid outside the group is refused.
		if out, err := bashAs(t, &cred{uid: 1003, gid: 1003}, "cat "+idx+"/list"); err == nil || !strings.Contains(out, "Permission denied") {
			t.Errorf("%s: a non-member reads index/list: %v %q", sp.name, err, out)
		}
	}
	settle()

	for _, sp := range spaces {
		top := filepath.Join(s.store, "shared", sp.name)
		n := 0
		filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				t.Errorf("walk %s: %v", p, err)
				return nil
			}
			if p == top {
				return nil // the space itself is root's, made by root
			}
			if strings.Contains(p, "/context/") || strings.HasSuffix(p, "/context") {
				return nil // free trees: modes are their users' (checked above)
			}
			st, err := os.Lstat(p)
			if err != nil {
				t.Errorf("%v", err)
				return nil
			}
			n++
			// History is root's in the store, closed to users, in the
			// space's group (the mount gives the group the owner's bits).
			want := os.FileMode(0o600)
			if st.IsDir() {
				want = 0o700
			} else if !st.Mode().IsRegular() {
				t.Errorf("%s: %v, want a regular file or a directory", p, st.Mode())
				return nil
			}
			if sys := st.Sys().(*syscall.Stat_t); sys.Gid != sp.group || sys.Uid != 0 || st.Mode().Perm() != want {
				t.Errorf("%s: owner %d:%d mode %v, want 0:%d mode %v", p, sys.Uid, sys.Gid, st.Mode(), sp.group, want)
			}
			return nil
		})
		if n == 0 {
			t.Errorf("%s: nothing in the store's space", sp.name)
		}
	}
	if out, code := s.fsck(); code != 0 {
		t.Errorf("fsck: exit %d\n%s", code, out)
	}
}

// TestSharedAgentMkdirMakesNoRoot: a member's mkdir of an agent in a
// space makes its session/ and nothing the store does not hold there (an
// agent's root/ is a private home's: a shared session runs in its
// member's), so fsck stays clean.
func TestSharedAgentMkdirMakesNoRoot(t *testing.T) {
	s := newFuseServer(t)
	s.spaceAdd("team", 1234)
	a := member(1001, 1234)
	if out, err := bashAs(t, a, "mkdir -p "+s.mnt("shared/team/agent/x")+" "+s.mnt("home/1001/agent/y")); err != nil {
		t.Fatalf("mkdir of the agents as uid 1001: %v %q", err, out)
	}
	for rel, want := range map[string]bool{
		"shared/team/agent/x/session": true, "shared/team/agent/x/root": false,
		"home/1001/agent/y/session": true, "home/1001/agent/y/root": true,
	} {
		if _, err := os.Lstat(filepath.Join(s.store, rel)); (err == nil) != want {
			t.Errorf("%s in the store: %v, want it there: %v", rel, err, want)
		}
	}
	settle()
	if out, code := s.fsck(); code != 0 || out != "clean\n" {
		t.Errorf("fsck after a member's mkdir of a shared agent: exit %d\n%s", code, out)
	}
}
