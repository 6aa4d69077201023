package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestRestoreFollowsNoSymlink: a version names its file by the directory
// the kernel reached when it was kept, which holds no symlink; a restore
// runs as whoever asks for it. In a shared session uid 1001's run
// changed its own dir/notes; uid 1001 then put a symlink to uid 1002's
// directory in dir's place, and uid 1002's restore of that version wrote
// uid 1001's chosen bytes into uid 1002's own notes. Now a restore
// resolves the kept path with no symlink: ELOOP (uid 1001's own restore
// through a symlink to another directory of its own), and uid 1002 may
// not restore uid 1001's version at all (EPERM, TestRestoreOnlyOwnRuns):
// uid 1002's file is as it was.
func TestRestoreFollowsNoSymlink(t *testing.T) {
	base := tmpDirForAll(t, "ctxfs-restore-")
	testkit.Must(t, os.Chown(base, 1001, 1001))
	alice, bob, other := filepath.Join(base, "alice"), filepath.Join(base, "bob"), filepath.Join(base, "other")
	for dir, uid := range map[string]int{alice: 1001, bob: 1002, other: 1001} {
		testkit.Must(t, os.Mkdir(dir, 0o755))
		testkit.Must(t, os.WriteFile(filepath.Join(dir, "notes"), []byte(fmt.Sprintf("uid %d's\n", uid)), 0o644))
		testkit.Must(t, os.Chown(filepath.Join(dir, "notes"), uid, uid))
		testkit.Must(t, os.Chown(dir, uid, uid))
	}
	p := newFakeProvider(t, scripted(
		openAICall("w1", "fs_write", fmt.Sprintf(`{"path":%q,"content":"new\n"}`, filepath.Join(alice, "notes"))),
		openAIReply("written")))
	s := newToolServer(t, p.URL+"/v1", map[string]string{"tools": "fs.write\n", "perm": "w\n"})
	s.spaceAdd("team", 1234)
	a, b := &cred{uid: 1001, gid: 1001, groups: []uint32{1234}}, &cred{uid: 1002, gid: 1002, groups: []uint32{1234}}
	frames, raw, err := s.requestAsWithin(a, "doer", `{"op":"send","id":"s1","session":"plan","scope":"shared","space":"team","input":"write it"}`, 60*time.Second)
	if d := lastDone(frames); err != nil || d == nil || d["status"] != "ok" {
		t.Fatalf("send: %v\n%s", err, raw)
	}
	if out, err := runCmd(t, a, nil, "sh", "-c", fmt.Sprintf("mv %s %s.old && ln -s %s %s", alice, alice, bob, alice)); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	frames, raw, err = s.requestAsWithin(b, "doer", `{"op":"restore","id":"x1","session":"plan","scope":"shared","space":"team","version":1}`, 60*time.Second)
	if err != nil {
		t.Fatalf("restore: %v\n%s", err, raw)
	}
	if got, _ := os.ReadFile(filepath.Join(bob, "notes")); string(got) != "uid 1002's\n" {
		t.Fatalf("uid 1002's notes now hold %q after its restore of uid 1001's version", got)
	}
	if len(frames) == 0 || frames[0]["code"] != "EPERM" {
		t.Errorf("uid 1002's restore of uid 1001's version: want EPERM\n%s", raw)
	}
	if out, err := runCmd(t, a, nil, "sh", "-c", fmt.Sprintf("rm %s && ln -s %s %s", alice, other, alice)); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	frames, raw, err = s.requestAsWithin(a, "doer", `{"op":"restore","id":"x2","session":"plan","scope":"shared","space":"team","version":1}`, 60*time.Second)
	if err != nil {
		t.Fatalf("restore: %v\n%s", err, raw)
	}
	if got, _ := os.ReadFile(filepath.Join(other, "notes")); string(got) != "uid 1001's\n" {
		t.Fatalf("uid 1001's other notes now hold %q after its restore through a symlink", got)
	}
	if d := lastDone(frames); d == nil || d["status"] == "ok" || !strings.Contains(raw, "ELOOP") {
		t.Errorf("the restore through a symlink: want ELOOP and not ok\n%s", raw)
	}
}
