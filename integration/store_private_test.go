package integration

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestStorePrivacy: the store is root's alone. After uid 1001 made a
// session with a send, neither it nor another uid in its group or in
// root's group can stat, open, list, append to or create anything in the
// store, its own home there included (EACCES); the store directory itself
// is 0700 root and cannot be opened or listed. The same files are
// readable by uid 1001 through the mount.
func TestStorePrivacy(t *testing.T) {
	s := newFuseServer(t)
	s.sendAs(uid1001, "default", "c1", "", "private words")
	settle()

	st, err := os.Stat(s.store)
	testkit.Must(t, err)
	if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 0 || st.Mode().Perm() != 0o700 || !st.IsDir() {
		t.Errorf("the store is %v owned by %d, want a 0700 directory owned by root", st.Mode(), sys.Uid)
	}
	sess := s.sessionDir(1001, "coder", "default")
	inside := []string{
		filepath.Join(s.store, "home"),
		filepath.Join(s.store, "home", "1001"),
		filepath.Join(s.store, "home", "1001", "agent", "coder", "session"),
		filepath.Join(s.store, "home", "1001", "agent", "coder", "session", "index"),
		filepath.Join(s.store, "home", "1001", "agent", "coder", "session", "index", "list"),
		sess,
		filepath.Join(sess, "messages.jsonl"),
		filepath.Join(sess, "state"),
		filepath.Join(sess, ".seal", "messages.jsonl"),
		filepath.Join(sess, ".seal", "identity"),
	}
	for _, p := range inside {
		if _, err := os.Lstat(p); err != nil {
			t.Fatalf("root cannot see %s after uid 1001's send: %v", p, err)
		}
	}
	before := storeSnapshot(t, s)
	for _, who := range []struct {
		uid    int
		groups []int
	}{{1001, nil}, {1001, []int{0, 1001}}, {1002, []int{0, 1001}}} {
		res := probeAs(t, who.uid, who.groups, append([]string{s.store}, inside...))
		for k, v := range res {
			op, p, _ := strings.Cut(k, " ")
			if p == s.store {
				// The store's own inode can be stat'ed through its parent
				// (a temporary directory open to all); opening it for
				// writing is EISDIR before any permission check.
				if op == "stat" || op == "append" && v == "EISDIR" {
					continue
				}
			}
			if v != "EACCES" {
				t.Errorf("uid %d groups %v: %s %s = %s, want EACCES", who.uid, who.groups, op, p, v)
			}
		}
		if len(res) == 0 {
			t.Fatalf("uid %d: the probe reported nothing", who.uid)
		}
	}
	testkit.Same(t, "other uids' attempts on the store", before, storeSnapshot(t, s))

	// Through the mount the owner reads, lists and stats the same things.
	m := s.mnt("home/1001/agent/coder/session/default")
	res := probeAs(t, 1001, nil, []string{m, m + "/messages.jsonl", m + "/state", s.mnt("home/1001/agent/coder/session/index/list")})
	for _, k := range []string{"stat " + m, "list " + m, "stat " + m + "/messages.jsonl", "read " + m + "/messages.jsonl", "read " + m + "/state",
		"read " + s.mnt("home/1001/agent/coder/session/index/list")} {
		if res[k] != "ok" {
			t.Errorf("uid 1001 through the mount: %s = %q, want ok", k, res[k])
		}
	}
	if out, err := bashAs(t, uid1001, "cat "+m+"/messages.jsonl"); err != nil || !strings.Contains(out, "private words") {
		t.Errorf("uid 1001 reads its log through the mount: %v %q", err, out)
	}
}
