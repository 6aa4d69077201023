package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// probe is a python3 program that tries, on each path it is given, the
// operations a curious uid would, and prints "<op> <path> <result>" lines
// (the errno name, or ok).
const probe = `
import errno, os, sys
def res(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
for p in sys.argv[1:]:
    print("stat", p, res(lambda: os.stat(p)))
    if os.path.basename(p) in ("ctl",):
        def ctl():
            fd = os.open(p, os.O_RDWR)
            try:
                os.write(fd, b'{"op":"ping"}\n')
            finally:
                os.close(fd)
        print("ctl", p, res(ctl))
        continue
    print("list", p, res(lambda: os.listdir(p)))
    print("read", p, res(lambda: open(p, "rb").read()))
    def append():
        fd = os.open(p, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, b'{"role":"user","content":"intruder"}\n')
        finally:
            os.close(fd)
    print("append", p, res(append))
    print("create", p, res(lambda: os.close(os.open(os.path.join(p, "x"), os.O_CREAT | os.O_WRONLY, 0o600))))
    print("mkdir", p, res(lambda: os.mkdir(os.path.join(p, "s2"))))
`

// as runs a command through setpriv with real ids (no /etc/passwd entry
// needed).
func as(t *testing.T, uid int, groups []int, env []string, args ...string) (string, error) {
	t.Helper()
	pa := []string{fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", uid)}
	if len(groups) == 0 {
		pa = append(pa, "--clear-groups")
	} else {
		var gs []string
		for _, g := range groups {
			gs = append(gs, strconv.Itoa(g))
		}
		pa = append(pa, "--groups="+strings.Join(gs, ","))
	}
	return runCmd(t, nil, env, "setpriv", append(pa, args...)...)
}

// probeAs runs probe as uid (with groups) and returns its results.
func probeAs(t *testing.T, uid int, groups []int, paths []string) map[string]string {
	t.Helper()
	out, err := as(t, uid, groups, nil, append([]string{"/usr/bin/python3", "-c", probe}, paths...)...)
	if err != nil {
		t.Fatalf("probe as %d: %v\n%s", uid, err, out)
	}
	res := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 3 {
			res[f[0]+" "+f[1]] = f[2]
		}
	}
	return res
}

// TestPrivacyWarmCaches: uid 1000's session, fully looked at by its owner
// first (the kernel caches every dentry and attribute), is still closed to
// uid 1001: EACCES or ENOENT for every operation, nothing written. Root
// sees everything.
func TestPrivacyWarmCaches(t *testing.T) {
	s := newFuseServer(t)
	env := []string{"CTX_ROOT=" + s.root}
	if out, err := as(t, 1000, nil, env, ctxBin, "agent", "send", "coder", "--session", "p", "hello from 1000"); err != nil {
		t.Fatalf("uid 1000 send: %v\n%s", err, out)
	}
	home := s.mnt("home/1000")
	sess := home + "/agent/coder/session/p"
	paths := []string{home, home + "/agent", home + "/agent/coder", home + "/agent/coder/session",
		home + "/agent/coder/session/index", home + "/agent/coder/session/index/list", home + "/agent/coder/session/index/current",
		home + "/agent/coder/root", sess, sess + "/context", sess + "/ctl"}
	for _, f := range []string{"messages.jsonl", "events.jsonl", "latest.md", "state", "cwd", "created_at", "updated_at", "meta.json"} {
		paths = append(paths, sess+"/"+f)
	}
	// The owner warms the caches: stat, list, read everything, ping ctl.
	warm := `set -e; for p in "$@"; do stat "$p" > /dev/null; if [ -d "$p" ]; then ls -la "$p" > /dev/null; elif [ "${p##*/}" = ctl ]; then exec 3<>"$p"; printf '{"op":"ping"}\n' >&3; cat <&3 > /dev/null; exec 3<&-; else cat "$p" > /dev/null; fi; done; cat ` + sess + `/messages.jsonl`
	out, err := as(t, 1000, nil, nil, append([]string{"/bin/bash", "-c", warm, "warm"}, paths...)...)
	if err != nil || !strings.Contains(out, "hello from 1000") {
		t.Fatalf("owner warming the caches: %v\n%s", err, out)
	}
	owner := probeAs(t, 1000, nil, []string{sess + "/messages.jsonl", sess + "/ctl"})
	if owner["read "+sess+"/messages.jsonl"] != "ok" || owner["append "+sess+"/messages.jsonl"] != "ok" || owner["ctl "+sess+"/ctl"] != "ok" {
		t.Fatalf("the owner itself is refused: %v", owner)
	}

	settle()
	before := storeSnapshot(t, s)
	for _, id := range []struct {
		uid    int
		groups []int
	}{{1001, nil}, {1001, []int{1000}}, {1002, []int{0, 1000}}} {
		res := probeAs(t, id.uid, id.groups, paths)
		for k, v := range res {
			op, p, _ := strings.Cut(k, " ")
			if p == home && (op == "stat" || op == "append" && v == "EISDIR") {
				continue // a home's own attributes are as public as /home/<user>'s
			}
			if v != "EACCES" && v != "ENOENT" {
				t.Errorf("uid %d groups %v: %s %s = %s, want EACCES or ENOENT", id.uid, id.groups, op, p, v)
			}
		}
		// Shell tools too, including a warm path the owner just used.
		for _, c := range []string{"cat " + sess + "/messages.jsonl", "ls " + sess, "echo '{}' >> " + sess + "/events.jsonl", "echo done > " + sess + "/state",
			"exec 3<>" + sess + "/ctl", "tail -n1 " + sess + "/latest.md", "ls " + home + "/agent/coder/root"} {
			out, err := as(t, id.uid, id.groups, nil, "/bin/bash", "-c", c)
			if err == nil || !strings.Contains(out, "Permission denied") && !strings.Contains(out, "No such file") {
				t.Errorf("uid %d: %s: %v %q", id.uid, c, err, out)
			}
		}
	}
	testkit.Same(t, "another uid's attempts", before, storeSnapshot(t, s))

	// Root may enter every home.
	if got := bash(t, "cat "+sess+"/messages.jsonl"); !strings.Contains(got, "hello from 1000") {
		t.Errorf("root reads uid 1000's log: %q", got)
	}
	if got := bash(t, "ls "+s.mnt("home")); !strings.Contains(got, "1000") {
		t.Errorf("root lists homes: %q", got)
	}
	st, err := os.Stat(sess + "/messages.jsonl")
	testkit.Must(t, err)
	if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 1000 || st.Mode().Perm() != 0o600 {
		t.Errorf("uid 1000's log: owner %d mode %v", sys.Uid, st.Mode())
	}

	// uid 1001's own home appears on first use (a socket send); 1000's
	// session stays untouched by it.
	if out, err := as(t, 1001, nil, env, ctxBin, "agent", "send", "coder", "--session", "p", "hello from 1001"); err != nil {
		t.Fatalf("uid 1001 send: %v\n%s", err, out)
	}
	if out, err := as(t, 1001, nil, nil, "cat", s.mnt("home/1001/agent/coder/session/p/messages.jsonl")); err != nil || !strings.Contains(out, "hello from 1001") || strings.Contains(out, "1000") {
		t.Errorf("uid 1001 reads its own session: %v %q", err, out)
	}
	if got := fileBytes(t, filepath.Join(s.sessionDir(1000, "coder", "p"), "messages.jsonl")); strings.Contains(got, "1001") {
		t.Errorf("uid 1001's send landed in uid 1000's session")
	}
	// A home appears for its own uid by lookup alone.
	if out, err := as(t, 1003, nil, nil, "stat", "-c", "%u %a", s.mnt("home/1003")); err != nil || out != "1003 700\n" {
		t.Errorf("uid 1003's home on first lookup: %v %q", err, out)
	}
	if out, err := as(t, 1003, nil, nil, "stat", s.mnt("home/1004")); err == nil {
		t.Errorf("uid 1003 sees uid 1004's missing home: %q", out)
	}
	if out, code := s.fsck(); code != 0 {
		t.Errorf("fsck: exit %d\n%s", code, out)
	}
}

// TestSharedSpaceAccess: spaces made by `ctxfs space add` (on the store,
// and through the mount) and by mkdir+chgrp+chmod through the mount; members read and write, others get
// EACCES even after a member warmed the caches; root sees all.
func TestSharedSpaceAccess(t *testing.T) {
	s := newFuseServer(t)
	out, err := runCmd(t, nil, nil, ctxfsBin, "space", "add", "team", "--group", "1234", "--store", s.store)
	if err != nil {
		t.Fatalf("ctxfs space add: %v\n%s", err, out)
	}
	space2 := s.mnt("shared/team2")
	testkit.Must(t, os.Mkdir(space2, 0o770))
	testkit.Must(t, os.Chown(space2, 0, 1235))
	testkit.Must(t, os.Chmod(space2, 0o2770))
	// Without --store, `space add` works through the mount at --root, so
	// it reaches the store the server there uses.
	if out, err := runCmd(t, nil, nil, ctxfsBin, "space", "add", "team3", "--group", "1236", "--root", s.root); err != nil {
		t.Fatalf("ctxfs space add --root: %v\n%s", err, out)
	}
	env := []string{"CTX_ROOT=" + s.root}
	for _, sp := range []struct {
		name  string
		group int
	}{{"team", 1234}, {"team2", 1235}, {"team3", 1236}} {
		space := s.mnt("shared/" + sp.name)
		sess := space + "/agent/coder/session/t1"
		member := []int{sp.group}
		// A member starts a shared session over the socket.
		if out, err := as(t, 1001, member, env, ctxBin, "agent", "send", "coder", "--scope", "shared", "--space", sp.name, "--session", "t1", "hello team"); err != nil {
			t.Fatalf("%s: member send: %v\n%s", sp.name, err, out)
		}
		// Another member reads it and appends to it through the mount.
		script := "cat " + sess + "/messages.jsonl && echo '{\"role\":\"user\",\"content\":\"from 1002\"}' >> " + sess + "/messages.jsonl && ls " + sess + " > /dev/null && cat " + sess + "/state"
		if out, err := as(t, 1002, member, nil, "/bin/bash", "-c", script); err != nil || !strings.Contains(out, "hello team") {
			t.Errorf("%s: second member reads and appends: %v %q", sp.name, err, out)
		}
		if out, err := as(t, 1002, member, env, ctxBin, "agent", "send", "coder", "--scope", "shared", "--space", sp.name, "--session", "t1", "again"); err != nil {
			t.Errorf("%s: second member sends: %v %s", sp.name, err, out)
		}
		if got := s.readMnt("shared/" + sp.name + "/agent/coder/session/t1/messages.jsonl"); !strings.Contains(got, "from 1002") || !strings.Contains(got, `"again"`) {
			t.Errorf("%s: log after both members: %q", sp.name, got)
		}
		settle()
		before := storeSnapshot(t, s)
		paths := []string{space, space + "/agent", sess, sess + "/messages.jsonl", sess + "/state", sess + "/ctl"}
		res := probeAs(t, 1003, nil, paths)
		for k, v := range res {
			if k == "stat "+space || k == "append "+space && v == "EISDIR" {
				continue // the space directory's own attributes are public
			}
			if v != "EACCES" && v != "ENOENT" {
				t.Errorf("%s: non-member %s = %s, want EACCES", sp.name, k, v)
			}
		}
		if res["list "+space] != "EACCES" {
			t.Errorf("%s: non-member lists the space: %s", sp.name, res["list "+space])
		}
		out, err := as(t, 1003, nil, env, ctxBin, "agent", "send", "coder", "--scope", "shared", "--space", sp.name, "--session", "t1", "intruder")
		if err == nil || !strings.Contains(out, "EACCES") {
			t.Errorf("%s: non-member send: %v %q", sp.name, err, out)
		}
		testkit.Same(t, "a non-member's attempts", before, storeSnapshot(t, s))
		if got := bash(t, "cat "+sess+"/messages.jsonl"); !strings.Contains(got, "hello team") {
			t.Errorf("%s: root reads the space: %q", sp.name, got)
		}
	}
	if out, code := s.fsck(); code != 0 {
		t.Errorf("fsck: exit %d\n%s", code, out)
	}
}
