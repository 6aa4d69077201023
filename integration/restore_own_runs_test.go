package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestRestoreOnlyOwnRuns: in a shared session a run is its caller's, and
// a restore is a run of whoever asks for it, while what it puts back (a
// path and a content) is what the version's run reported, which a member
// who tampers with their own tool process can choose. uid 1002's restore
// (and root's) of a version uid 1001's run made wrote it as uid 1002 (as
// root). Now a member restores only what their own runs changed: EPERM
// before anything is recorded or written, after a restart too; uid
// 1001's own restore works.
func TestRestoreOnlyOwnRuns(t *testing.T) {
	base := tmpDirForAll(t, "ctxfs-restore-own-")
	dir := filepath.Join(base, "team")
	testkit.Must(t, os.Mkdir(dir, 0o775))
	testkit.Must(t, os.Chown(dir, 0, 1234))
	testkit.Must(t, os.Chmod(dir, 0o2775))
	notes := filepath.Join(dir, "notes")
	testkit.Must(t, os.WriteFile(notes, []byte("before\n"), 0o664))
	testkit.Must(t, os.Chown(notes, 1001, 1234))
	p := newFakeProvider(t, scripted(
		openAICall("w1", "fs_write", fmt.Sprintf(`{"path":%q,"content":"new\n"}`, notes)),
		openAIReply("written")))
	s := newToolServer(t, p.URL+"/v1", map[string]string{"tools": "fs.write\n", "perm": "w\n"})
	s.spaceAdd("team", 1234)
	alice, bob := member(1001, 1234), member(1002, 1234)
	frames, raw, err := s.requestAsWithin(alice, "doer", `{"op":"send","id":"s1","session":"plan","scope":"shared","space":"team","input":"write it"}`, 60*time.Second)
	if d := lastDone(frames); err != nil || d == nil || d["status"] != "ok" {
		t.Fatalf("send: %v\n%s", err, raw)
	}
	run := frames[0]["run"].(string)
	sess := s.mnt("shared/team/agent/doer/session/plan")
	logs := func() string {
		var b strings.Builder
		for _, f := range []string{"events.jsonl", "messages.jsonl", "versions/index.jsonl"} {
			b.WriteString(fileBytes(t, filepath.Join(sess, f)))
		}
		return b.String()
	}
	before := logs()
	restore := func(c *cred, id, sel string) ([]frame, string) {
		t.Helper()
		frames, raw, err := s.requestAsWithin(c, "doer", fmt.Sprintf(`{"op":"restore","id":%q,"session":"plan","scope":"shared","space":"team",%s}`, id, sel), 60*time.Second)
		if err != nil || len(frames) == 0 {
			t.Fatalf("restore as %s: %v\n%s", credName(c), err, raw)
		}
		return frames, raw
	}
	for i, tc := range []struct {
		c       *cred
		id, sel string
	}{
		{bob, "b1", `"version":1`},
		{bob, "b2", fmt.Sprintf(`"run":%q`, run)},
		{nil, "r1", `"version":1`},
		{bob, "b3", `"version":1`}, // after a restart: from the start events
	} {
		if i == 3 {
			s.restart(syscall.SIGTERM)
		}
		frames, raw := restore(tc.c, tc.id, tc.sel)
		if frames[0]["type"] != "error" || frames[0]["code"] != "EPERM" || strings.Contains(raw, `"type":"start"`) {
			t.Errorf("%s's restore of uid 1001's %s: want EPERM and no run\n%.600s", credName(tc.c), tc.sel, raw)
		}
		if got := fileBytes(t, notes); got != "new\n" {
			t.Errorf("after %s's refused restore the file holds %q", credName(tc.c), got)
		}
		if after := logs(); after != before {
			t.Errorf("%s's refused restore recorded %d bytes", credName(tc.c), len(after)-len(before))
		}
	}
	if frames, raw := restore(alice, "a1", `"version":1`); lastDone(frames) == nil || lastDone(frames)["status"] != "ok" {
		t.Fatalf("uid 1001's restore of its own run's version: %.600s", raw)
	}
	if got := fileBytes(t, notes); got != "before\n" {
		t.Errorf("after uid 1001's restore the file holds %q, want its earlier content", got)
	}
}
