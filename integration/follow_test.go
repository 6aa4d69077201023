package integration

import (
	"fmt"
	"strings"
	"syscall"
	"testing"

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
