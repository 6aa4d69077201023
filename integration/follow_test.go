package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// The follower's view (cluster/replica, ctxfs mount --follow): a second
// mount of a store another server writes, on this machine as a follower
// host would mount it over a shared filesystem.

// sessionFiles are the files of a session a reader compares.
var sessionFiles = []string{"messages.jsonl", "events.jsonl", "state", "cwd", "meta.json", "latest.md", "created_at", "updated_at"}

// lookAs is what c sees of each path under a mount root: for each, its
// size, owner, group, mode and type, and its content (a listing for a
// directory), or the error the tools print, with the root replaced by
// ROOT so that two mounts of one store compare equal.
func lookAs(t *testing.T, c *cred, root string, rels []string) string {
	t.Helper()
	var script strings.Builder
	for _, rel := range rels {
		p := root + "/" + rel
		fmt.Fprintf(&script, "echo '== %s'; stat -c '%%s %%u %%g %%a %%F' %s 2>&1; if [ -d %s ]; then ls -a %s 2>&1; else cat %s 2>&1; fi; echo \"rc=$?\"\n", rel, p, p, p, p)
	}
	out, _ := bashAs(t, c, script.String())
	return strings.ReplaceAll(out, root, "ROOT")
}

// sideBySide fails for each path whose look differs on the two mounts.
func sideBySide(t *testing.T, what string, c *cred, w, f *server, rels []string) {
	t.Helper()
	for _, rel := range rels {
		onW, onF := lookAs(t, c, w.root, []string{rel}), lookAs(t, c, f.root, []string{rel})
		if onW != onF {
			t.Errorf("%s as %s: %s differs\non the writer:\n%s\non the follower:\n%s", what, credName(c), rel, onW, onF)
		}
	}
}

// TestFollowServesTheWritersTree: sessions sent on the writer appear on
// the follower with the same sizes and bytes, those sent before it
// started and after; and who sees what is the writer's mount's, to the
// error: uid 1002 sees nothing of uid 1001's private sessions, root's
// neither, with the same errnos on both mounts.
func TestFollowServesTheWritersTree(t *testing.T) {
	w := newFuseServer(t)
	w.sendAs(uid1001, "a", "a1", "", "hello a")
	w.send("r", "r1", "root's own")
	if out, err := bashAs(t, uid1002, "ls "+w.mnt("home/1002")); err != nil { // made on 1002's first look, by the writer
		t.Fatalf("home/1002 on the writer: %v %s", err, out)
	}
	f := newFollower(t, w)
	w.sendAs(uid1001, "a", "a2", "", "after the follower started")
	w.sendAs(uid1001, "b", "b1", "", "a session made after the follower started")
	settle() // derived values reach the store behind the writer's memory

	var own []string
	for _, s := range []string{"a", "b"} {
		for _, file := range sessionFiles {
			own = append(own, uid1001CoderAt+s+"/"+file)
		}
		own = append(own, uid1001CoderAt+s)
	}
	own = append(own, uid1001CoderAt, uid1001CoderAt+"index/list", "home/1001", "home/1001/agent/coder")
	sideBySide(t, "the owner's sessions", uid1001, w, f, own)
	sideBySide(t, "root's session", nil, w, f, []string{sessRel("r") + "/messages.jsonl", sessRel("r"), "home", "shared"})
	if got := f.readMnt(uid1001CoderAt + "a/messages.jsonl"); !strings.Contains(got, "after the follower started") {
		t.Errorf("the follower's messages.jsonl of a does not hold the send made after it started:\n%s", got)
	}

	others := append([]string{"home/1002", "home/0", sessRel("r"), sessRel("r") + "/messages.jsonl", sessRel("r") + "/ctl"}, own...)
	others = append(others, uid1001CoderAt+"a/ctl", uid1001CoderAt+"index/current", "home/1001/agent/coder/root")
	sideBySide(t, "another uid", uid1002, w, f, others)
}

// TestFollowRefusesEveryChange: reading everything through the follower's
// mount writes nothing in the store (not even the server's own .ctxfs
// files); every change through it
// is EROFS (Read-only file system), for the owner and for root alike: an
// append to a log, a request written to ctl, a value written, a session
// made, a file removed or renamed, a touch, an index value written, a
// file, directory or removal in a free tree; and nothing in the store
// changes, not a byte, owner, mode or time. The writer is stopped first:
// the store is then the follower's alone, so any change is the
// follower's.
func TestFollowRefusesEveryChange(t *testing.T) {
	w := newFuseServer(t)
	w.sendAs(uid1001, "a", "a1", "", "hello a")
	free := "home/1001/agent/coder/root"
	if out, err := bashAs(t, uid1001, "mkdir -p "+w.mnt(free)+" && echo mine > "+w.mnt(free+"/f")); err != nil {
		t.Fatalf("a file in 1001's free tree, on the writer: %v %s", err, out)
	}
	f := newFollower(t, w)
	w.kill(w.cmd, syscall.SIGTERM)
	before := hostSnapshot(t, w.store)

	a := f.mnt(uid1001CoderAt + "a")
	// Reads first: every file and listing of the tree, a log opened and
	// verified (its journal read), the index loaded; none of it writes.
	for _, c := range []*cred{uid1001, nil} {
		if out, err := bashAs(t, c, "find "+f.mnt("home")+" "+f.mnt("shared")+" -type f -exec cat {} + >/dev/null; ls -laR "+f.mnt("home")+" >/dev/null; tail -n 1 "+a+"/messages.jsonl"); err != nil || !strings.Contains(out, "hello a") {
			t.Errorf("reads on the follower as %s: %v %s", credName(c), err, out)
		}
	}
	diffs, _ := hostDiffs(before, hostSnapshot(t, w.store))
	if len(diffs) > 0 {
		t.Errorf("reads on the follower changed the store:\n%s", strings.Join(diffs, "\n"))
	}

	changes := []string{
		`printf '%s\n' '{"role":"user","content":"by hand"}' >> ` + a + "/messages.jsonl",
		`printf '%s\n' '{"op":"send","input":"hi"}' > ` + a + "/ctl",
		"echo done > " + a + "/state",
		"echo '{}' > " + a + "/meta.json",
		"mkdir " + f.mnt(uid1001CoderAt+"c"),
		"rm " + a + "/state",
		"rmdir " + a,
		"mv " + a + " " + f.mnt(uid1001CoderAt+"moved"),
		"touch " + a + "/state",
		"touch " + a + "/new",
		"echo a > " + f.mnt(uid1001CoderAt+"index/current"),
		"echo a > " + f.mnt(uid1001CoderAt+"index/by-hash/k1"),
		"echo more >> " + f.mnt(free+"/f"),
		"echo new > " + f.mnt(free+"/g"),
		"mkdir " + f.mnt(free+"/d"),
		"rm " + f.mnt(free+"/f"),
		"truncate -s 0 " + f.mnt(free+"/f"),
		"ln -s f " + f.mnt(free+"/link"),
		"chmod 644 " + f.mnt(free+"/f"),
	}
	for _, c := range []*cred{uid1001, nil} {
		for _, change := range changes {
			out, err := bashAs(t, c, change)
			if err == nil || !strings.Contains(out, "Read-only file system") {
				t.Errorf("as %s on the follower: %s: %v %q, want EROFS (Read-only file system)", credName(c), change, err, out)
			}
		}
	}
	diffs, _ = hostDiffs(before, hostSnapshot(t, w.store))
	if len(diffs) > 0 {
		t.Errorf("refused changes on the follower changed the store:\n%s", strings.Join(diffs, "\n"))
	}
	testkit.WantErrno(t, "an append opened through the follower", appendMnt(a+"/events.jsonl", "{}\n"), syscall.EROFS)
}

// TestFollowTailSeesEachLine: a `tail -f` on the follower of a session
// the writer sends to sees each new line within a second of the send's
// end (the follower's watcher announces the log's new size: without it
// the kernel keeps the size it had for an hour). GNU tail polls a file
// on FUSE (every second by default; -s 0.1 here, so the bound is the
// follower's).
func TestFollowTailSeesEachLine(t *testing.T) {
	w := newFuseServer(t)
	w.sendAs(uid1001, "t", "t0", "", "first line")
	f := newFollower(t, w)
	got := tailSeesEachSend(t, w, f, "the follower")
	if want := fileBytes(t, w.mnt(uid1001CoderAt+"t/messages.jsonl")); got != want {
		t.Errorf("tail -f on the follower shows\n%s\nthe writer's log is\n%s", got, want)
	}
}

// tailSeesEachSend runs `tail -f -s 0.1` as uid 1001 on its session t's
// messages.jsonl through reader's mount (its first line sent already),
// sends five lines through w, and requires each to reach tail within a
// second of its send's end. It returns what tail showed.
func tailSeesEachSend(t *testing.T, w, reader *server, who string) string {
	t.Helper()
	tail := exec.Command("tail", "-f", "-s", "0.1", "-n", "+1", reader.mnt(uid1001CoderAt+"t/messages.jsonl"))
	tail.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001}, Setpgid: true}
	var mu sync.Mutex
	var seen strings.Builder
	tail.Stdout = writerFunc(func(b []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return seen.Write(b)
	})
	testkit.Must(t, tail.Start())
	t.Cleanup(func() { stopProcess(tail, syscall.SIGKILL) })
	shown := func() string {
		mu.Lock()
		defer mu.Unlock()
		return seen.String()
	}
	shows := func(what string) func() bool { return func() bool { return strings.Contains(shown(), what) } }
	failed := func() string {
		return "tail -f on " + who + " shows:\n" + shown() + "\nits server's log:\n" + lastLines(reader.logText(), 20)
	}
	waitUntil(t, 10*time.Second, shows("first line"), failed)
	for i := 1; i <= 5; i++ {
		line := fmt.Sprintf("line %d from the writer", i)
		w.sendAs(uid1001, "t", fmt.Sprintf("t%d", i), "", line)
		sent := time.Now()
		waitUntil(t, 5*time.Second, shows(`"`+line+`"}]`), failed) // the assistant's echo: the send's last line
		if took := time.Since(sent); took > time.Second {
			t.Errorf("%q reached tail -f on %s %v after the send ended, want within a second", line, who, took)
		}
	}
	return shown()
}

// writerFunc is an io.Writer of a function.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// TestFollowDamagedLogIsEIO: a log damaged in the store (a byte flipped
// inside its sealed part, its size kept) is EIO at its open on the
// follower, though the follower had verified and read it before; the
// other logs still read, also one the writer has appended to since its
// last seal (verified against the writer's journal).
func TestFollowDamagedLogIsEIO(t *testing.T) {
	w := newFuseServer(t)
	w.sendAs(uid1001, "a", "a1", "", "hello a")
	w.sendAs(uid1001, "b", "b1", "", "hello b")
	f := newFollower(t, w)
	damaged := uid1001CoderAt + "b/messages.jsonl"
	if out, err := runCmd(t, uid1001, nil, "cat", f.mnt(damaged)); err != nil || !strings.Contains(out, "hello b") {
		t.Fatalf("b on the follower before the damage: %v %s", err, out)
	}
	w.kill(w.cmd, syscall.SIGTERM) // b's log is sealed whole
	p := filepath.Join(w.store, damaged)
	b := []byte(fileBytes(t, p))
	b[10] ^= 1
	testkit.Must(t, os.WriteFile(p, b, 0o600))
	w.start()
	w.sendAs(uid1001, "a", "a2", "", "after the restart") // a's seal now lags its log: the journal vouches

	for _, c := range []*cred{uid1001, nil} {
		out, err := runCmd(t, c, nil, "cat", f.mnt(damaged))
		if err == nil || !strings.Contains(out, "Input/output error") {
			t.Errorf("the damaged log on the follower, as %s: %v %q, want EIO", credName(c), err, out)
		}
		out, err = runCmd(t, c, nil, "cat", f.mnt(uid1001CoderAt+"a/messages.jsonl"))
		if err != nil || !strings.Contains(out, "after the restart") {
			t.Errorf("a's log on the follower, as %s: %v %s", credName(c), err, out)
		}
	}
	f.waitLogText("damaged history refused")
}
