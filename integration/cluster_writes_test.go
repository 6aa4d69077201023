package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/cluster/ca"
	"github.com/ctxfs/ctxfs/cluster/peer"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"golang.org/x/sys/unix"
)

// TestClusterWritesOnFollower: a request written to a session's ctl file
// on a follower host's mount, and lines appended to its logs there, are
// relayed to the writer host and made there (SPEC 19: every host serves
// the whole tree to its local users), a request's frames read back
// through the same file: a send through the follower's
// ctl is recorded once, its frames from start to done; `echo … > ctl`
// (a truncating open) works as on the writer; a request the writer
// refuses fails the write with its errno and leaves one error frame, and
// writes nothing. The writer checks the caller again (it vouches only for
// the uid): a relayed request of another uid for 1001's session is
// EACCES, one for a session that does not exist ENOENT, both writing
// nothing; a hello naming a session outside its target is EINVAL.
func TestClusterWritesOnFollower(t *testing.T) {
	c := newTestCluster(t, 2*time.Second, nil, "a", "b")
	w := c.waitWriter("", 20*time.Second)
	f := c.follower(w)
	w.srv.sendAs(uid1001, "k", "k0", "", "first")
	ctl := f.srv.mnt(uid1001CoderAt + "k/ctl")
	msgs := w.srv.mnt(uid1001CoderAt + "k/messages.jsonl")

	out, err := bashAs(t, uid1001, `exec 3<>`+ctl+`; printf '%s\n' '{"op":"send","id":"k1","input":"through the follower"}' >&3; cat <&3`)
	if err != nil {
		t.Fatalf("a send through the follower's ctl: %v %s", err, out)
	}
	checkSendFrames(t, "the follower's ctl", out)
	out, err = bashAs(t, uid1001, `printf '%s\n' '{"op":"send","id":"k2","input":"echoed into ctl"}' > `+ctl)
	if err != nil {
		t.Fatalf("echo > ctl on the follower: %v %s", err, out)
	}
	got := fileBytes(t, msgs)
	for _, input := range []string{"through the follower", "echoed into ctl"} {
		if n := strings.Count(got, `"content":"`+input+`"`); n != 1 { // the user's line; the echo's is a text part
			t.Errorf("%q is sent in the writer's messages.jsonl %d times, want once:\n%s", input, n, got)
		}
	}

	// An append through the follower's mount is made on the writer, durable
	// when the write returns, and read back at once through the follower
	// and through the writer's own mount (sizes and bytes), whose kernel
	// had the log's size from a stat just before: the writer announces a
	// relayed append as a change its own kernel did not see (it kept the
	// old size until something else marked it stale, which CI's load once
	// put after the read); an unfinished line closed is recorded as lost
	// there, as on the writer's own mount.
	fmsgs := f.srv.mnt(uid1001CoderAt + "k/messages.jsonl")
	out, err = bashAs(t, uid1001, `stat -c %s `+msgs+` >/dev/null && printf '%s\n' '{"role":"user","content":"by hand on the follower"}' >> `+fmsgs+` && tail -n 1 `+fmsgs+` && stat -c %s `+fmsgs+` `+msgs)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); err != nil || len(lines) != 3 || !strings.Contains(lines[0], "by hand on the follower") {
		t.Errorf("an append through the follower's mount: %v %q", err, out)
	} else if want := fmt.Sprint(len(fileBytes(t, fmsgs))); lines[1] != want || lines[2] != want {
		t.Errorf("after the follower's append, its stat says %s bytes and the writer's %s; it reads %s", lines[1], lines[2], want)
	}
	if got := fileBytes(t, msgs); strings.Count(got, "by hand on the follower") != 1 || !strings.Contains(got, `"content":"by hand on the follower","uid":1001}`) {
		t.Errorf("the writer's messages.jsonl after an append through the follower:\n%s", got)
	}
	if out, err := bashAs(t, uid1001, `printf '%s' '{"role":"user","content":"unfinished"}' >> `+fmsgs); err != nil {
		t.Errorf("an unfinished line through the follower: %v %q", err, out)
	}
	eventually(t, 5*time.Second, "the lost line recorded in the writer's events.jsonl", func() bool {
		return strings.Contains(fileBytes(t, w.srv.mnt(uid1001CoderAt+"k/events.jsonl")), "partial line discarded")
	})

	out, err = bashAs(t, uid1001, `printf '%s\n' 'not json' >> `+fmsgs)
	if err == nil || !strings.Contains(out, "Invalid argument") {
		t.Errorf("a bad line through the follower's mount: %v %q, want EINVAL", err, out)
	}
	eventually(t, 5*time.Second, "the refused line recorded as lost in the writer's events.jsonl", func() bool {
		return strings.Contains(fileBytes(t, w.srv.mnt(uid1001CoderAt+"k/events.jsonl")), "lines written were refused")
	})
	out, err = bashAs(t, uid1002, `printf '%s\n' '{"role":"user","content":"not mine"}' >> `+fmsgs)
	if err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("uid 1002's append to 1001's log through the follower: %v %q, want EACCES", err, out)
	}
	// A value written through the follower's mount is made on the writer
	// at the close, and read back at once through the follower; a bad one
	// fails its write there, the old value kept.
	fcwd := f.srv.mnt(uid1001CoderAt + "k/cwd")
	if out, err := bashAs(t, uid1001, `printf '/srv/work\n' > `+fcwd+` && cat `+fcwd); err != nil || out != "/srv/work\n" {
		t.Errorf("cwd written through the follower's mount: %v %q", err, out)
	}
	if got := fileBytes(t, w.srv.mnt(uid1001CoderAt+"k/cwd")); got != "/srv/work\n" {
		t.Errorf("the writer's cwd after a write through the follower: %q", got)
	}
	if out, err := bashAs(t, uid1001, `printf 'relative\n' > `+fcwd); err == nil || !strings.Contains(out, "Invalid argument") {
		t.Errorf("a bad cwd through the follower's mount: %v %q, want EINVAL", err, out)
	}
	if out, err := bashAs(t, uid1001, `touch -d @1600000000 `+fcwd+` && stat -c %Y `+fcwd); err != nil || out != "1600000000\n" {
		t.Errorf("a touch of a value through the follower's mount, then its mtime there: %v %q", err, out)
	} else if st, err := os.Stat(w.srv.mnt(uid1001CoderAt + "k/cwd")); err != nil || st.ModTime().Unix() != 1600000000 {
		t.Errorf("the writer's cwd after a touch through the follower: %v %v", st.ModTime(), err)
	}

	time.Sleep(1200 * time.Millisecond) // the writer's values written behind settle
	before := hostSnapshot(t, c.store)
	out, err = bashAs(t, uid1001, `exec 3<>`+ctl+`; printf '%s\n' '{"op":"send","id":"k3","session":"other","input":"x"}' >&3; echo "write=$?"; cat <&3`)
	if err != nil || !strings.Contains(out, "Invalid argument") || !strings.Contains(out, "write=1") || strings.Count(out, `"code":"EINVAL"`) != 1 {
		t.Errorf("a request for another session through the follower's ctl: %v %q, want the write EINVAL and one error frame", err, out)
	}

	// The writer's own check, with a hello as host f would send it.
	id, err := ca.Load(f.certs)
	testkit.Must(t, err)
	relayed := func(uid uint32, session, line string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h := peer.Hello{Uid: uid, Gid: uid, Kind: "agent", Owner: "coder", Session: session}
		conn, err := peer.Dial(ctx, w.peerAddr(), id, h)
		if err != nil {
			return err
		}
		r, err := peer.Control(conn, []byte(line), peer.Held{})
		if err == nil {
			r.Close()
		}
		return err
	}
	send := `{"op":"send","id":"z1","input":"forged"}`
	line := `{"role":"user","content":"forged"}` + "\n"
	changed := func(uid uint32, session, file, op, data string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h := peer.Hello{Uid: uid, Gid: uid, Kind: "agent", Owner: "coder", Session: session, File: file}
		conn, err := peer.Dial(ctx, w.peerAddr(), id, h)
		if err != nil {
			return err
		}
		return peer.SendChange(conn, peer.FileChange{Op: op}, []byte(data))
	}
	appended := func(uid uint32, session, log, lines string) error {
		return changed(uid, session, log, peer.LogAppend, lines)
	}
	written := func(uid uint32, session, file, value string) error {
		return changed(uid, session, file, peer.ValueWrite, value)
	}
	testkit.WantErrno(t, "uid 1002's write of 1001's cwd, relayed", written(1002, "home/1001/agent/coder/session/k", "cwd", "/\n"), syscall.EACCES)
	testkit.WantErrno(t, "a write of a log, relayed", written(1001, "home/1001/agent/coder/session/k", "messages.jsonl", line), syscall.EINVAL)
	testkit.WantErrno(t, "a bad state, relayed", written(1001, "home/1001/agent/coder/session/k", "state", "asleep\n"), syscall.EINVAL)
	testkit.WantErrno(t, "a file that is no value, relayed", written(1001, "home/1001/agent/coder/session/k", "latest.md", "x\n"), syscall.EINVAL)
	testkit.WantErrno(t, "uid 1002's append to 1001's log, relayed", appended(1002, "home/1001/agent/coder/session/k", "messages.jsonl", line), syscall.EACCES)
	testkit.WantErrno(t, "an append to a value, relayed", appended(1001, "home/1001/agent/coder/session/k", "state", line), syscall.EINVAL)
	testkit.WantErrno(t, "a bad line, relayed", appended(1001, "home/1001/agent/coder/session/k", "messages.jsonl", "not json\n"), syscall.EINVAL)
	testkit.WantErrno(t, "uid 1002 at 1001's session, relayed", relayed(1002, "home/1001/agent/coder/session/k", send), syscall.EACCES)
	testkit.WantErrno(t, "a session that does not exist, relayed", relayed(1001, "home/1001/agent/coder/session/nosuch", send), syscall.ENOENT)
	testkit.WantErrno(t, "a session of another agent, relayed", relayed(1001, "home/1001/agent/other/session/k", send), syscall.EINVAL)
	testkit.WantErrno(t, "a path that is no session, relayed", relayed(1001, "home/1001/agent/coder/session/k/../k", send), syscall.EINVAL)
	if diffs, _ := hostDiffs(before, hostSnapshot(t, c.store)); len(diffs) > 0 {
		t.Errorf("refused ctl requests changed the store:\n%s", strings.Join(diffs, "\n"))
	}
}

// TestClusterFollowerIndexCurrent: a follower shows the session the last
// send made current within its index's second, not when the writer's
// journal checkpoints (30 s): `ctx agent send` without --session on a
// follower goes where the last send went, as on the writer.
func TestClusterFollowerIndexCurrent(t *testing.T) {
	c := newTestCluster(t, 2*time.Second, nil, "a", "b")
	w := c.waitWriter("", 20*time.Second)
	f := c.follower(w)
	w.srv.sendAs(uid1001, "c1", "c1-0", "", "one")
	w.srv.sendAs(uid1001, "c2", "c2-0", "", "two")
	cur := f.srv.mnt(uid1001CoderAt + "index/current")
	eventually(t, 3*time.Second, "the follower's index/current naming c2", func() bool {
		b, err := os.ReadFile(cur)
		return err == nil && string(b) == "c2\n"
	})
	if out, errs, code := ctxSplitAs(t, f.srv, uid1001, "agent", "send", "coder", "a follow-up"); code != 0 {
		t.Fatalf("ctx agent send on the follower: exit %d\n%s%s", code, out, errs)
	}
	if got := fileBytes(t, w.srv.mnt(uid1001CoderAt+"c2/messages.jsonl")); !strings.Contains(got, `"content":"a follow-up"`) {
		t.Errorf("the follow-up without --session on the follower is not in c2, the current session:\n%s", got)
	}
}

// TestClusterTreeChangesOnFollower: a session made by mkdir on a
// follower's mount, index values written and removed there, a uid's home
// on its first look, root's shared space (mkdir, chgrp, chmod) and a
// session archived by renameat2 there are relayed to the writer and made
// there (SPEC 2, 5, 9, 12, 19), and read back at once through the
// follower. A name the ABI does not allow, a chmod of history, a rename
// that is no archive are refused as the writer refuses them (EPERM,
// EINVAL), not EROFS. The writer checks each relayed change as its own
// kernel would (a host vouches only for the uid): another uid's mkdir,
// index write, unlink, touch or archive in 1001's home are EACCES; a
// chown, a chgrp to a group not the caller's, a chmod of history, a
// by-cwd entry's removal, a mkdir of a file are EPERM; a write of no
// user-written index value, a setattr with a field no mount sends, a
// rename out of the tree and a change in a free tree are EINVAL; each
// writes nothing.
func TestClusterTreeChangesOnFollower(t *testing.T) {
	c := newTestCluster(t, 2*time.Second, nil, "a", "b")
	w := c.waitWriter("", 20*time.Second)
	f := c.follower(w)
	w.srv.sendAs(uid1001, "k", "k0", "", "first")
	at := func(s *server, rel string) string { return s.mnt(uid1001CoderAt + rel) }

	if out, err := bashAs(t, uid1001, `mkdir `+at(f.srv, "made-on-f")+` && cat `+at(f.srv, "made-on-f/state")); err != nil || out != "idle\n" {
		t.Fatalf("mkdir of a session on the follower, then its state there: %v %q", err, out)
	}
	if got := fileBytes(t, at(w.srv, "made-on-f/state")); got != "idle\n" {
		t.Errorf("the writer's state of the session made on the follower: %q", got)
	}
	if out, err := bashAs(t, uid1001, `mkdir `+at(f.srv, "made-on-f")); err == nil || !strings.Contains(out, "File exists") {
		t.Errorf("a second mkdir of it on the follower: %v %q, want EEXIST", err, out)
	}
	if out, err := bashAs(t, uid1001, `echo made-on-f > `+at(f.srv, "index/current")+` && cat `+at(f.srv, "index/current")); err != nil || out != "made-on-f\n" {
		t.Errorf("index/current written on the follower, then read there: %v %q", err, out)
	}
	if got := fileBytes(t, at(w.srv, "index/current")); got != "made-on-f\n" {
		t.Errorf("the writer's index/current after a write on the follower: %q", got)
	}
	if out, err := bashAs(t, uid1001, `echo k > `+at(f.srv, "index/by-hash/h1")+` && cat `+at(f.srv, "index/by-hash/h1")); err != nil || out != "k\n" {
		t.Errorf("a by-hash entry made on the follower, then read there: %v %q", err, out)
	}
	if got := fileBytes(t, at(w.srv, "index/by-hash/h1")); got != "k\n" {
		t.Errorf("the writer's by-hash/h1 after a write on the follower: %q", got)
	}
	if out, err := bashAs(t, uid1001, `echo nosuch > `+at(f.srv, "index/current")); err == nil || !strings.Contains(out, "No such file") {
		t.Errorf("index/current naming no session, on the follower: %v %q, want ENOENT", err, out)
	}
	if out, err := bashAs(t, uid1001, `mkdir `+at(f.srv, "made-on-f/notes")); err == nil || !strings.Contains(out, "Operation not permitted") {
		t.Errorf("mkdir of a name outside the ABI on the follower: %v %q, want EPERM", err, out)
	}
	if out, err := bashAs(t, uid1001, `mkdir '`+at(f.srv, "a bad name")+`'`); err == nil || !strings.Contains(out, "Invalid argument") {
		t.Errorf("mkdir of a bad session name on the follower: %v %q, want EINVAL", err, out)
	}
	if out, err := bashAs(t, uid1001, `rm `+at(f.srv, "index/by-hash/h1")+` && ! test -e `+at(f.srv, "index/by-hash/h1")); err != nil {
		t.Errorf("rm of a by-hash entry on the follower: %v %q", err, out)
	}
	if _, err := os.Lstat(at(w.srv, "index/by-hash/h1")); !os.IsNotExist(err) {
		t.Errorf("the writer's by-hash/h1 after rm on the follower: %v, want ENOENT", err)
	}
	if out, err := bashAs(t, uid1001, `rm `+at(f.srv, "made-on-f/state")); err == nil || !strings.Contains(out, "Operation not permitted") {
		t.Errorf("rm of a session file on the follower: %v %q, want EPERM", err, out)
	}
	if out, err := bashAs(t, uid1001, `chmod 644 `+at(f.srv, "made-on-f/state")); err == nil || !strings.Contains(out, "Operation not permitted") {
		t.Errorf("chmod of a session file on the follower: %v %q, want EPERM", err, out)
	}
	if out, err := bashAs(t, uid1001, `mv `+at(f.srv, "made-on-f")+` `+at(f.srv, "renamed")); err == nil || !strings.Contains(out, "Operation not permitted") {
		t.Errorf("mv of a session on the follower: %v %q, want EPERM", err, out)
	}

	// Root makes a shared space on the follower as on the writer (SPEC
	// 2: mkdir, then chgrp and chmod), and archives a session by renaming it.
	space := f.srv.mnt("shared/team")
	testkit.Must(t, os.Mkdir(space, 0o700))
	testkit.Must(t, os.Chown(space, -1, 1234))
	testkit.Must(t, os.Chmod(space, 0o770|os.ModeSetgid))
	if st, err := os.Stat(w.srv.mnt("shared/team")); err != nil || st.Sys().(*syscall.Stat_t).Gid != 1234 || st.Mode()&(os.ModePerm|os.ModeSetgid) != 0o770|os.ModeSetgid {
		t.Errorf("the writer's shared/team after root made it on the follower: %v %v", st.Mode(), err)
	}
	testkit.Must(t, os.Mkdir(at(f.srv, "old"), 0o700))
	testkit.Must(t, os.MkdirAll(f.srv.mnt("home/1001/archived_sessions/coder"), 0o700))
	testkit.Must(t, unix.Renameat2(unix.AT_FDCWD, at(f.srv, "old"), unix.AT_FDCWD, f.srv.mnt("home/1001/archived_sessions/coder/old"), unix.RENAME_NOREPLACE))
	if got := fileBytes(t, w.srv.mnt("home/1001/archived_sessions/coder/old/state")); got != "idle\n" {
		t.Errorf("the session archived on the follower, on the writer: %q", got)
	}
	if _, err := os.Stat(at(w.srv, "old")); !os.IsNotExist(err) {
		t.Errorf("the session archived on the follower is still live on the writer: %v", err)
	}

	// A uid's own home appears on its first use on the follower too.
	if _, err := os.Lstat(w.srv.mnt("home/1002")); err == nil {
		t.Fatal("uid 1002 has a home before its first use")
	}
	if out, err := bashAs(t, uid1002, `ls -ld `+f.srv.mnt("home/1002")); err != nil || !strings.HasPrefix(out, "drwx------") {
		t.Errorf("uid 1002's first look at its home on the follower: %v %q", err, out)
	}
	if st, err := os.Stat(w.srv.mnt("home/1002")); err != nil || st.Sys().(*syscall.Stat_t).Uid != 1002 {
		t.Errorf("uid 1002's home on the writer after its first look on the follower: %v", err)
	}

	// The writer's own checks, with hellos as host f would send them.
	testkit.Must(t, os.WriteFile(at(w.srv, "index/by-hash/kept"), []byte("k\n"), 0o600))
	time.Sleep(1200 * time.Millisecond) // the writer's values written behind settle
	id, err := ca.Load(f.certs)
	testkit.Must(t, err)
	changeAt := func(uid uint32, rel, op, data string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := peer.Dial(ctx, w.peerAddr(), id, peer.Hello{Uid: uid, Gid: uid, Path: rel})
		if err != nil {
			return err
		}
		return peer.SendChange(conn, peer.FileChange{Op: op}, []byte(data))
	}
	before := hostSnapshot(t, c.store)
	home := "home/1001/agent/coder/session/"
	testkit.WantErrno(t, "uid 1002's mkdir in 1001's home, relayed", changeAt(1002, home+"forged", peer.TreeMkdir, ""), syscall.EACCES)
	testkit.WantErrno(t, "uid 1002's write of 1001's index/current, relayed", changeAt(1002, home+"index/current", peer.ValueWrite, "k\n"), syscall.EACCES)
	testkit.WantErrno(t, "uid 1002's by-hash entry in 1001's index, relayed", changeAt(1002, home+"index/by-hash/x", peer.ValueWrite, "k\n"), syscall.EACCES)
	testkit.WantErrno(t, "uid 1002's unlink of 1001's by-hash entry, relayed", changeAt(1002, home+"index/by-hash/kept", peer.TreeUnlink, ""), syscall.EACCES)
	testkit.WantErrno(t, "a by-cwd entry written, relayed", changeAt(1001, home+"index/by-cwd/cwd-0000000000000000", peer.ValueWrite, "k\n"), syscall.EINVAL)
	testkit.WantErrno(t, "a session's state unlinked, relayed", changeAt(1001, home+"k/state", peer.TreeUnlink, ""), syscall.EPERM)
	testkit.WantErrno(t, "a mkdir of a session's log, relayed", changeAt(1001, home+"k/messages.jsonl", peer.TreeMkdir, ""), syscall.EPERM)
	testkit.WantErrno(t, "an append at a tree path, relayed", changeAt(1001, home+"k/messages.jsonl", peer.LogAppend, "{}\n"), syscall.EINVAL)
	testkit.WantErrno(t, "uid 1002's mkdir of 1001's home, relayed", changeAt(1002, "home/1001", peer.TreeMkdir, ""), syscall.EACCES)
	testkit.WantErrno(t, "uid 1002's touch of 1001's state, relayed", changeAt(1002, home+"k/state", peer.TreeSetattr, `{"times":[{"Sec":1,"Nsec":0},{"Sec":1,"Nsec":0}]}`), syscall.EACCES)
	testkit.WantErrno(t, "1001's chown of its state to 1002, relayed", changeAt(1001, home+"k/state", peer.TreeSetattr, `{"uid":1002}`), syscall.EPERM)
	testkit.WantErrno(t, "1001's chgrp of its state to a group not its own, relayed", changeAt(1001, home+"k/state", peer.TreeSetattr, `{"gid":0}`), syscall.EPERM)
	testkit.WantErrno(t, "1001's chmod of its state, relayed", changeAt(1001, home+"k/state", peer.TreeSetattr, `{"mode":420}`), syscall.EPERM)
	testkit.WantErrno(t, "1001's chgrp of root's space, relayed", changeAt(1001, "shared/team", peer.TreeSetattr, `{"gid":1001}`), syscall.EPERM)
	testkit.WantErrno(t, "a setattr with a field no mount sends, relayed", changeAt(1001, home+"k/state", peer.TreeSetattr, `{"owner":"root"}`), syscall.EINVAL)
	testkit.WantErrno(t, "uid 1002's archive of 1001's session, relayed", changeAt(1002, home+"k", peer.TreeRename, `{"to":"home/1001/archived_sessions/coder/k","flags":1}`), syscall.EACCES)
	testkit.WantErrno(t, "a rename to no archive, relayed", changeAt(1001, home+"k", peer.TreeRename, `{"to":"home/1001/agent/coder/session/k2","flags":1}`), syscall.EPERM)
	testkit.WantErrno(t, "a rename out of the tree, relayed", changeAt(1001, home+"k", peer.TreeRename, `{"to":"../../etc/k","flags":1}`), syscall.EINVAL)
	testkit.WantErrno(t, "a change in a free tree, relayed", changeAt(1001, "home/1001/agent/coder/root/x", peer.TreeMkdir, ""), syscall.EINVAL)
	testkit.WantErrno(t, "uid 1002's mkdir of a space, relayed", changeAt(1002, "shared/forged", peer.TreeMkdir, ""), syscall.EACCES)
	if diffs, _ := hostDiffs(before, hostSnapshot(t, c.store)); len(diffs) > 0 {
		t.Errorf("refused tree changes changed the store:\n%s", strings.Join(diffs, "\n"))
	}
}

// TestClusterFormerWriterSeesNewWrites: a host that wrote the store and
// follows again after a partition serves what the new writer writes,
// through the same mount: a log its users read while it wrote (whose
// size the kernel kept) grows there, and a session made since is listed
// in a listing its users read then, each within a second or two (SPEC 5:
// stat sizes are exact; readers see appended data at once).
func TestClusterFormerWriterSeesNewWrites(t *testing.T) {
	ttl := 2 * time.Second
	c := newTestCluster(t, ttl, nil, "a", "b")
	w := c.waitWriter("", 20*time.Second)
	w.srv.mustRequest("coder", `{"op":"send","session":"seen","id":"s1","input":"before the cut"}`)
	log := w.srv.mnt("home/0/agent/coder/session/seen/messages.jsonl")
	dir := w.srv.mnt("home/0/agent/coder/session")
	before := fileBytes(t, log)
	if ents, err := os.ReadDir(dir); err != nil || len(ents) == 0 {
		t.Fatalf("listing %s on the writer: %v", dir, err)
	}
	w.net.partition()
	next := c.waitWriter(w.name, 15*time.Second)
	w.net.heal()
	next.srv.mustRequest("coder", `{"op":"send","session":"seen","id":"s2","input":"after the cut"}`)
	next.srv.mustRequest("coder", `{"op":"send","session":"made-since","id":"s3","input":"new"}`)
	want := fileBytes(t, next.srv.mnt("home/0/agent/coder/session/seen/messages.jsonl"))
	if len(want) <= len(before) {
		t.Fatalf("the new writer's log did not grow: %d then %d bytes", len(before), len(want))
	}
	eventually(t, 10*time.Second, "the former writer's mount reading the new writer's line, at its exact size", func() bool {
		st, err := os.Stat(log)
		return err == nil && st.Size() == int64(len(want)) && fileBytes(t, log) == want
	})
	eventually(t, 10*time.Second, "the former writer's mount listing the session made since", func() bool {
		_, err := os.Stat(filepath.Join(dir, "made-since"))
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.Name() == "made-since" {
				return err == nil
			}
		}
		return false
	})
}

// TestClusterFollowerResumeAfterRecordedError: a `resume` written to a
// session's ctl on a follower answers what the writer's ctl answers, its
// recorded frames from the first: one that is an error record (a lost
// line the server recorded, or a line a member appended) is history
// replayed, not the writer's refusal of the request. The follower took
// the reply's first error frame for a refusal: the write failed with the
// record's errno and the rest of the reply was dropped.
func TestClusterFollowerResumeAfterRecordedError(t *testing.T) {
	c := newTestCluster(t, 2*time.Second, nil, "a", "b")
	w := c.waitWriter("", 20*time.Second)
	f := c.follower(w)
	events, run := w.srv.firstRunOfK()
	if out, err := bashAs(t, uid1001, `printf '%s' '{"role":"user","content":"unfinished"}' >> `+w.srv.mnt(uid1001CoderAt+"k/messages.jsonl")); err != nil {
		t.Fatalf("an unfinished line: %v %q", err, out)
	}
	eventually(t, 5*time.Second, "the lost line recorded", func() bool {
		return strings.Contains(fileBytes(t, events), "partial line discarded")
	})
	resume := func(h *clusterHost, after string) string {
		out, err := bashAs(t, uid1001, `exec 3<>`+h.srv.mnt(uid1001CoderAt+"k/ctl")+`; printf '%s\n' '{"op":"resume","after":"`+after+`"}' >&3; echo "write=$?"; cat <&3`)
		if err != nil {
			t.Errorf("a resume through %s's ctl: %v %q", h.name, err, out)
		}
		return out
	}
	want := resume(w, run)
	if !strings.HasPrefix(want, "write=0\n") || !strings.Contains(want, "partial line discarded") {
		t.Fatalf("a resume through the writer's ctl: %q", want)
	}
	if got := resume(f, run); got != want {
		t.Errorf("a resume through the follower's ctl:\n%s\nthe writer's:\n%s", got, want)
	}
	// A resume after the last run has no frame at all, on either host.
	w.srv.sendAs(uid1001, "k", "k1", "", "second")
	runs := regexp.MustCompile(`"run":"([^"]+)"`).FindAllStringSubmatch(fileBytes(t, events), -1)
	last := runs[len(runs)-1][1]
	if got, want := resume(f, last), resume(w, last); got != want || want != "write=0\n" {
		t.Errorf("a resume after the last run through the follower's ctl: %q, the writer's: %q, want write=0 alone", got, want)
	}
}

// TestClusterFollowerHeldRepliesCounted: the frames of ctl replies a
// follower read from the writer and holds for readers who do not read
// count with their uid's unfinished bytes (16 MiB). A user who opened its
// ctl 400 times on a follower, each a resume whose first frame is a 1 MB
// line of its events.jsonl, and read none, made the follower hold a frame
// each (200 such replies: 351 MiB; nothing bounded their count but the
// uid's 1,024 open files), where the writer's own mount reads a resume's
// lines as its reader asks: a reply whose frame is past the uid's share
// is now one EAGAIN error frame, and the follower holds its share.
func TestClusterFollowerHeldRepliesCounted(t *testing.T) {
	c := newTestCluster(t, 2*time.Second, nil, "a", "b")
	w := c.waitWriter("", 20*time.Second)
	f := c.follower(w)
	events, run := w.srv.firstRunOfK()
	got, grown, release := heldResumes(t, f.srv, events, f.srv.mnt(uid1001CoderAt+"k/ctl"), `{"op":"resume","after":"`+run+`"}`, false)
	t.Logf("400 resumes through the follower's ctl, none read: %s; the follower grew by %d MiB", got, grown)
	if got != "written=400" {
		t.Errorf("the resumes' writes answered %s, want written=400", got)
	}
	// A frame each is 400 MiB and more; the uid's 16 MiB, the collector's
	// slack and each reply's connection (its TLS buffers, about 0.1 MiB,
	// held until the reader closes) are far less.
	if grown > 160 {
		t.Errorf("the follower holds %d MiB more for 400 unread replies", grown)
	}
	release()
	out, err := bashAs(t, uid1001, `exec 3<>`+f.srv.mnt(uid1001CoderAt+"k/ctl")+`; printf '%s\n' '{"op":"resume","after":"`+run+`"}' >&3; cat <&3`)
	if err != nil || !strings.Contains(out, strings.Repeat("a", 1000000)) {
		t.Errorf("a resume read through the follower's ctl once the others are closed: %v, %d bytes", err, len(out))
	}
}
