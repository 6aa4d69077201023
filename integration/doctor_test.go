package integration

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// doctor runs `ctx doctor` as c (nil: root) against s's root and store.
func doctor(t *testing.T, s *server, c *cred, args ...string) (string, int) {
	t.Helper()
	out, err := runCmd(t, c, []string{"CTX_ROOT=" + s.root, "CTXFS_STORE=" + s.store}, ctxBin, append([]string{"doctor"}, args...)...)
	return out, exitStatus(t, err)
}

// wantFinding fails unless the doctor's output has the line.
func wantFinding(t *testing.T, what, out, line string) {
	t.Helper()
	if !strings.Contains(out, line+"\n") {
		t.Errorf("%s: no line %q in\n%s", what, line, out)
	}
}

// TestDoctor runs ctx doctor on a healthy mount, then with an invalid
// definition, with a store others can write, and with the server stopped:
// each problem is named with its fix, and the exit status says whether
// there was one.
func TestDoctor(t *testing.T) {
	s := newFuseServer(t)
	out, code := doctor(t, s, nil)
	if code != 0 || !strings.HasSuffix(out, "no problems found\n") {
		t.Fatalf("healthy: exit %d\n%s", code, out)
	}
	wantFinding(t, "healthy", out, "ok: mount "+s.mnt("home")+" (ctxfs, server uid 0)")
	wantFinding(t, "healthy", out, "ok: socket "+filepath.Join(s.root, "agent/coder.sock")+" (answers ping)")
	wantFinding(t, "healthy", out, "ok: store "+s.store)
	wantFinding(t, "healthy", out, "ok: store ways (moves: renameat2(RENAME_NOREPLACE); derived values: renameat2(RENAME_EXCHANGE); O_TMPFILE: yes (unused); walks: openat2(RESOLVE_BENEATH); hard links: yes; directory fsync: yes; open files' blocks: counted)")
	if out, code := doctor(t, s, nil, "--json"); code != 0 || !strings.Contains(out, `{"check":"definition agent coder","ok":true}`+"\n") {
		t.Errorf("--json: exit %d\n%s", code, out)
	}

	s.define("broken", map[string]string{"abi": "xml"})
	eventually(t, 10*time.Second, "a socket for broken", func() bool {
		_, err := os.Stat(filepath.Join(s.root, "agent/broken.sock"))
		return err == nil
	})
	out, code = doctor(t, s, nil)
	if code != 1 {
		t.Errorf("invalid definition: exit %d, want 1", code)
	}
	wantFinding(t, "invalid definition", out, "problem: definition agent broken: invalid: "+
		filepath.Join(s.root, "agent/broken.d/abi")+`: "xml" is neither jsonl nor text`)
	testkit.Must(t, os.RemoveAll(filepath.Join(s.root, "agent/broken.d")))

	testkit.Must(t, os.Chmod(s.store, 0o702))
	out, code = doctor(t, s, nil)
	testkit.Must(t, os.Chmod(s.store, 0o700))
	if code != 1 {
		t.Errorf("store others can write: exit %d, want 1", code)
	}
	wantFinding(t, "store others can write", out, "problem: store "+s.store+": "+s.store+" is writable by every user (mode 0702)\n"+
		"  fix: chmod 0700 "+s.store+" (the store is the server's alone)")

	s.kill(s.cmd, syscall.SIGTERM)
	out, code = doctor(t, s, nil)
	if code != 1 {
		t.Errorf("server stopped: exit %d, want 1", code)
	}
	for _, top := range []string{"home", "shared"} {
		wantFinding(t, "server stopped", out, "problem: mount "+s.mnt(top)+": not mounted: the server is not running\n"+
			"  fix: start it: ctxfs mount --root "+s.root)
	}
	wantFinding(t, "server stopped", out, "problem: sockets: none of the 2 definitions has a socket that answers: the server is not running")
}

// TestDoctorAsUser: a user sees the mounts and the definitions, is told
// what the store's mode hides, and learns whether /dev/fuse is usable for
// a server of their own.
func TestDoctorAsUser(t *testing.T) {
	s := newFuseServer(t)
	user := &cred{uid: 4242, gid: 4242}
	out, _ := doctor(t, s, user)
	wantFinding(t, "as a user", out, "ok: mount "+s.mnt("home")+" (ctxfs, server uid 0)")
	wantFinding(t, "as a user", out, "ok: store "+s.store+" (its entries not checked: EACCES: permission denied (run ctx doctor as root))")
	wantFinding(t, "as a user", out, "ok: /etc/fuse.conf user_allow_other (not needed: the server runs as root)")
	if unix4242CanOpen(t) {
		wantFinding(t, "as a user", out, "ok: /dev/fuse")
		return
	}
	// Only the server opens /dev/fuse: a user who cannot is told so, and
	// it is no problem while the server is root's, running or not.
	wantFinding(t, "as a user", out, "ok: /dev/fuse (uid 4242 cannot open it: EACCES: permission denied; not needed: the server runs as root)")
	s.kill(s.cmd, syscall.SIGTERM)
	out, _ = doctor(t, s, user)
	wantFinding(t, "as a user, no server", out, "ok: /dev/fuse (uid 4242 cannot open it: EACCES: permission denied; not needed: the server is run by root ("+s.root+" is root's))")

	// A root of the user's own is for a server of their own: then it is.
	own := filepath.Join(filepath.Dir(s.root), "own") // reachable: 0755 above
	testkit.Must(t, os.Mkdir(own, 0o755))
	testkit.Must(t, os.Chown(own, 4242, 4242))
	out, code := doctor(t, &server{root: own, store: s.store}, user)
	if code != 1 {
		t.Errorf("a user's own root: exit %d, want 1", code)
	}
	wantFinding(t, "a user's own root", out, "problem: /dev/fuse: uid 4242 cannot open it: EACCES: permission denied")
}

// unix4242CanOpen reports whether uid 4242 may open /dev/fuse here.
func unix4242CanOpen(t *testing.T) bool {
	_, err := bashAs(t, &cred{uid: 4242, gid: 4242}, "exec 3<>/dev/fuse")
	return err == nil
}
