package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
	"golang.org/x/sys/unix"
)

// storeUnchanged fails the test unless the store is as before: no byte,
// owner, mode or time changed, nothing added or removed (reads are not
// judged).
func storeUnchanged(t testing.TB, what string, before, after map[string]string) {
	t.Helper()
	if diffs, _ := hostDiffs(before, after); len(diffs) > 0 {
		t.Errorf("%s changed the tree:\n%s", what, strings.Join(diffs, "\n"))
	}
}

// TestSendRefusedCreatesNoSession: a send of exactly the request limit to
// a session that does not exist yet, whose user message line would be
// over the line limit, is EINVAL and leaves the store as it was: no
// session directory, no seal, no index entry (issue 20, item 9).
func TestSendRefusedCreatesNoSession(t *testing.T) {
	s := newFuseServer(t)
	s.send("first", "c0", "hello")
	settle() // the derived files and the index's list reach the store
	const skeleton = `{"op":"send","id":"big","session":"fresh","input":""}`
	line := `{"op":"send","id":"big","session":"fresh","input":"` + strings.Repeat("x", 1<<20-len(skeleton)) + `"}`
	if len(line) != 1<<20 {
		t.Fatalf("request of %d bytes", len(line))
	}
	before := hostSnapshot(t, s.store)
	for i := 0; i < 2; i++ {
		frames := s.mustRequest("coder", line)
		if code := errorCode(frames); code != "EINVAL" || hasFrame(frames, "start") {
			t.Fatalf("send %d: %v", i, frames)
		}
		storeUnchanged(t, "a refused send to a new session", before, hostSnapshot(t, s.store))
	}
	if _, err := os.Lstat(s.mnt(sessRel("fresh"))); !os.IsNotExist(err) {
		t.Errorf("the refused session is seen through the mount: %v", err)
	}
	if strings.Contains(s.readMnt(sessRel("index")+"/list"), "fresh") {
		t.Errorf("the refused session is listed")
	}
}

// TestArchiveRefusedCreatesNothing: `ctx agent session archive` with
// --archive-dir on another filesystem (a tmpfs) is EXDEV and makes
// nothing there, whether DIR exists or not, nor anything in the store
// (issue 20, item 9).
func TestArchiveRefusedCreatesNothing(t *testing.T) {
	s := newFuseServer(t)
	s.send("old", "c0", "hello")
	s.send("default", "c1", "the current one")
	settle()
	tmp := t.TempDir()
	testkit.Must(t, unix.Mount("tmpfs", tmp, "tmpfs", 0, "size=1m"))
	t.Cleanup(func() { unix.Unmount(tmp, unix.MNT_DETACH) })
	for _, dir := range []string{tmp, filepath.Join(tmp, "new", "deeper")} {
		storeBefore, tmpBefore := hostSnapshot(t, s.store), hostSnapshot(t, tmp)
		out, code := s.ctx(t, "agent", "session", "archive", "coder", "old", "--archive-dir", dir)
		if code != 1 || out != "ctx: archive old: EXDEV\n" {
			t.Errorf("archive to %s: exit %d %q", dir, code, out)
		}
		storeUnchanged(t, "a refused archive (store)", storeBefore, hostSnapshot(t, s.store))
		storeUnchanged(t, "a refused archive (the other filesystem)", tmpBefore, hostSnapshot(t, tmp))
	}
	if got := s.readMnt(sessRel("old") + "/messages.jsonl"); !strings.Contains(got, "hello") {
		t.Errorf("the session is not live after the refusals: %q", got)
	}
}
