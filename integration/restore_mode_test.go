package integration

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestRestoreNewFileOwnerOnly: a version keeps a file's bytes, not its
// mode, and a restore that must make the file anew (it is gone) made it
// 0644 less the umask: uid 1001's 0600 secret, changed by a run, then
// removed, came back readable by every user. Now a file a restore makes
// is 0600 (a file still there keeps its own mode).
func TestRestoreNewFileOwnerOnly(t *testing.T) {
	p := newFakeProvider(t, scripted(
		openAICall("w0", "fs_write", `{"path":"seed","content":"seed\n"}`),
		openAIReply("seeded"),
		openAICall("w1", "fs_write", `{"path":"secret","content":"x\n"}`),
		openAIReply("written")))
	s := newToolServer(t, p.URL+"/v1", map[string]string{"tools": "fs.write\n", "perm": "rw\n"})
	if d := lastDone(waitRunDone(t, s.sendAsync(owner, "v", "seed"))); d == nil || d["status"] != "ok" {
		t.Fatalf("seed: %v", d)
	}
	secret := s.mnt("home/1001/agent/doer/root/secret")
	if out, err := runCmd(t, owner, nil, "sh", "-c", "umask 077 && echo the secret > "+secret); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	if d := lastDone(waitRunDone(t, s.sendAsync(owner, "v", "overwrite it"))); d == nil || d["status"] != "ok" {
		t.Fatalf("run: %v", d)
	}
	if out, err := runCmd(t, owner, nil, "rm", secret); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	frames, raw, err := s.requestAs(owner, "doer", `{"op":"restore","id":"x1","session":"v","version":2}`)
	if d := lastDone(frames); err != nil || d == nil || d["status"] != "ok" {
		t.Fatalf("restore: %v\n%s", err, raw)
	}
	file := filepath.Join(s.store, "home", "1001", "agent", "doer", "root", "secret")
	st, err := os.Stat(file)
	testkit.Must(t, err)
	if got := fileBytes(t, file); got != "the secret\n" || st.Mode().Perm()&0o077 != 0 {
		t.Fatalf("restored secret: %q mode %v, want its bytes, owner only", got, st.Mode().Perm())
	}
}

// TestTempSessionKeepsNoVersions: a temp session (SPEC 8) lives in memory
// and has no store, so a tool's change in one keeps no version: the file
// is changed, nothing is written under versions/ anywhere, and a restore
// in the temp scope is EINVAL (README, "The file versions' store").
func TestTempSessionKeepsNoVersions(t *testing.T) {
	p := newFakeProvider(t, scripted(
		openAICall("w1", "fs_write", `{"path":"tmpfile","content":"x\n"}`),
		openAIReply("written")))
	s := newToolServer(t, p.URL+"/v1", map[string]string{"tools": "fs.write\n", "perm": "rw\n"})
	frames, raw, err := s.requestAs(owner, "doer", `{"op":"send","id":"t1","scope":"temp","session":"t","input":"write it"}`)
	if d := lastDone(frames); err != nil || d == nil || d["status"] != "ok" {
		t.Fatalf("temp send: %v\n%s", err, raw)
	}
	if got := fileBytes(t, filepath.Join(s.store, "home", "1001", "agent", "doer", "root", "tmpfile")); got != "x\n" {
		t.Fatalf("the temp run's file holds %q", got)
	}
	testkit.Must(t, filepath.WalkDir(s.store, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == "versions" {
			t.Errorf("a temp run made %s", p)
		}
		return nil
	}))
	frames, raw, err = s.requestAs(owner, "doer", `{"op":"restore","id":"x1","scope":"temp","session":"t","version":1}`)
	if err != nil || len(frames) == 0 {
		t.Fatalf("restore: %v %s", err, raw)
	}
	wantCode(t, frames[0], "EINVAL")
}
