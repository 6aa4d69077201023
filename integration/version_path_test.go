package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersionPathNotUTF8: a version names its file by a JSON string, which
// holds only UTF-8. uid 1001's directory "caf\xe9" (Latin-1, as old trees
// have them), reached by the model through the symlink "cafe", had its
// file kept as "caf\ufffd/notes": the restore then wrote the content to
// another directory's file ("caf\ufffd" in UTF-8), and never to the one
// changed. Now a change of a file whose path is not UTF-8 is refused
// (EINVAL) before anything is kept or changed.
func TestVersionPathNotUTF8(t *testing.T) {
	p := newFakeProvider(t, scripted(
		openAICall("w0", "fs_write", `{"path":"seed","content":"seed\n"}`),
		openAIReply("seeded"),
		openAICall("w1", "fs_write", `{"path":"cafe/notes","content":"new\n"}`),
		openAIReply("written")))
	s := newToolServer(t, p.URL+"/v1", map[string]string{"tools": "fs.write\n", "perm": "rw\n"})
	if d := lastDone(waitRunDone(t, s.sendAsync(owner, "v", "seed"))); d == nil || d["status"] != "ok" {
		t.Fatalf("seed: %v", d)
	}
	dir := s.mnt("home/1001/agent/doer/root")
	mk := "cd " + dir + " && mkdir \"$(printf 'caf\\351')\" \"$(printf 'caf\\357\\277\\275')\" && " +
		"echo old > \"$(printf 'caf\\351')/notes\" && echo other > \"$(printf 'caf\\357\\277\\275')/notes\" && ln -s \"$(printf 'caf\\351')\" cafe"
	if out, err := runCmd(t, owner, nil, "sh", "-c", mk); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	frames := waitRunDone(t, s.sendAsync(owner, "v", "write cafe/notes"))
	root := filepath.Join(s.store, "home", "1001", "agent", "doer", "root")
	latin, utf := filepath.Join(root, "caf\xe9", "notes"), filepath.Join(root, "caf\ufffd", "notes")
	if b, _ := os.ReadFile(latin); string(b) == "new\n" {
		// Changed: then its version must put it back, and nothing else.
		res, raw, err := s.requestAs(owner, "doer", `{"op":"restore","id":"x1","session":"v","version":2}`)
		got, _ := os.ReadFile(latin)
		other, _ := os.ReadFile(utf)
		if err != nil || string(got) != "old\n" || string(other) != "other\n" {
			t.Fatalf("restore of the changed file: %v %v; caf\\xe9/notes %q, caf\\ufffd/notes %q\n%.600s", err, lastDone(res), got, other, raw)
		}
		return
	}
	msgs := fileBytes(t, filepath.Join(s.sessionDir(1001, "doer", "v"), "messages.jsonl"))
	if !strings.Contains(msgs, `EINVAL`) {
		t.Errorf("the refused change's result is not EINVAL: %v", frames)
	}
	if out, err := runCmd(t, owner, nil, "cat", s.mnt("home/1001/agent/doer/session/v/versions/index.jsonl")); err != nil || strings.Count(out, "\n") != 1 {
		t.Errorf("versions after a refused change: %v\n%s", err, out)
	}
}
