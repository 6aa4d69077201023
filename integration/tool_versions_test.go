package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestToolRunVersionsAndRestore: a model run writes and replaces a file
// in its cwd as uid 1001 (SPEC 17); each change keeps the file's earlier
// state in versions/ (create, modify, modify); a restore by version puts
// one back and is versioned itself; a restore by run takes the file away
// (it did not exist before that run: a delete version); restoring that
// restore brings it back. Every restore is a recorded run.
func TestToolRunVersionsAndRestore(t *testing.T) {
	p := newFakeProvider(t, scripted(
		openAICall("w1", "fs_write", `{"path":"notes.txt","content":"one\n"}`),
		openAICall("w2", "fs_write", `{"path":"notes.txt","content":"two\n"}`),
		openAICall("r1", "fs_replace", `{"path":"notes.txt","old":"two","new":"three"}`),
		openAIReply("written")))
	s := newToolServer(t, p.URL+"/v1", map[string]string{"tools": "fs.read\nfs.write\nfs.replace\n", "perm": "rw\n"})
	frames := waitRunDone(t, s.sendAsync(owner, "v", "write notes"))
	if d := lastDone(frames); d == nil || d["status"] != "ok" {
		t.Fatalf("run: %v", frames)
	}
	run := frames[0]["run"].(string)
	file := filepath.Join(s.store, "home", "1001", "agent", "doer", "root", "notes.txt")
	wantFile := func(want string) {
		t.Helper()
		b, err := os.ReadFile(file)
		if want == "" {
			if !os.IsNotExist(err) {
				t.Fatalf("notes.txt: %q %v, want it absent", b, err)
			}
			return
		}
		if string(b) != want {
			t.Fatalf("notes.txt: %q %v, want %q", b, err, want)
		}
	}
	wantFile("three\n")
	index := s.mnt("home/1001/agent/doer/session/v/versions/index.jsonl")
	wantVersions := func(actions ...string) string {
		t.Helper()
		out, err := runCmd(t, owner, nil, "cat", index)
		if err != nil || strings.Count(out, "\n") != len(actions) {
			t.Fatalf("versions/index.jsonl: %v\n%s", err, out)
		}
		for i, a := range actions {
			if !strings.Contains(strings.Split(out, "\n")[i], fmt.Sprintf(`"v":%d,`, i+1)) || !strings.Contains(strings.Split(out, "\n")[i], `"action":"`+a+`"`) {
				t.Fatalf("version %d is not %s:\n%s", i+1, a, out)
			}
		}
		return out
	}
	wantVersions("create", "modify", "modify")
	restore := func(id, what string) {
		t.Helper()
		frames, raw, err := s.requestAs(owner, "doer", fmt.Sprintf(`{"op":"restore","id":%q,"session":"v",%s}`, id, what))
		if d := lastDone(frames); err != nil || d == nil || d["status"] != "ok" {
			t.Fatalf("restore %s: %v\n%s", what, err, raw)
		}
	}
	restore("x1", `"version":3`)
	wantFile("two\n")
	wantVersions("create", "modify", "modify", "modify")
	restore("x2", fmt.Sprintf(`"run":%q`, run))
	wantFile("")
	wantVersions("create", "modify", "modify", "modify", "delete")
	restore("x3", `"version":5`)
	wantFile("two\n")
	out := wantVersions("create", "modify", "modify", "modify", "delete", "create")
	if !strings.Contains(out, `"path":"`) {
		t.Fatalf("index lines name no path:\n%s", out)
	}
	frames, _, _ = s.requestAs(owner, "doer", `{"op":"restore","id":"x4","session":"v","version":99}`)
	wantCode(t, frames[0], "ENOENT")
	msgs := fileBytes(t, filepath.Join(s.sessionDir(1001, "doer", "v"), "messages.jsonl"))
	for _, want := range []string{`"content":"restore version 3"`, `"name":"fs.write"`, `"name":"fs.remove"`, `"tool_call_id":"w1"`} {
		if !strings.Contains(msgs, want) {
			t.Errorf("messages.jsonl lacks %s:\n%s", want, msgs)
		}
	}
	fsckClean(t, s)
}

// TestRestoreLargeFile: a restore whose calls cannot be recorded (a kept
// content of 1 MiB is 1.4 MiB of base64 in the assistant message that
// holds them; versions keep up to 8 MiB) is refused EFBIG before any run
// starts, and nothing changes. The run used to start: its batch was
// refused (EINVAL, a line over the bound) while its write went on, and it
// ended in error, the file put back or not as the race went.
func TestRestoreLargeFile(t *testing.T) {
	p := newFakeProvider(t, scripted(
		openAICall("w1", "fs_write", `{"path":"big.txt","content":"small\n"}`),
		openAIReply("written")))
	s := newToolServer(t, p.URL+"/v1", map[string]string{"tools": "fs.read\nfs.write\n", "perm": "rw\n"})
	file := filepath.Join(s.store, "home", "1001", "agent", "doer", "root", "big.txt")
	if out, err := runCmd(t, owner, nil, "sh", "-c", "mkdir -p "+s.mnt("home/1001/agent/doer")+" && yes 0123456789abcde | head -c 1048576 > "+s.mnt("home/1001/agent/doer/root/big.txt")); err != nil {
		t.Fatalf("writing big.txt as uid 1001: %v %s", err, out)
	}
	frames := waitRunDone(t, s.sendAsync(owner, "v", "shrink big.txt"))
	if d := lastDone(frames); d == nil || d["status"] != "ok" {
		t.Fatalf("run: %v", frames)
	}
	events := filepath.Join(s.sessionDir(1001, "doer", "v"), "events.jsonl")
	before := fileBytes(t, events)
	frames, raw, _ := s.requestAs(owner, "doer", `{"op":"restore","id":"x1","session":"v","version":1}`)
	if len(frames) != 1 || frames[0]["code"] != "EFBIG" {
		t.Errorf("restore of 1 MiB: %.1500s, want only an EFBIG error", raw)
	}
	if b, _ := os.ReadFile(file); string(b) != "small\n" {
		t.Errorf("big.txt after a refused restore: %d bytes, want %q", len(b), "small\n")
	}
	if after := fileBytes(t, events); after != before {
		t.Errorf("a refused restore was recorded:\n%.1500s", after[len(before):])
	}
	fsckClean(t, s)
}
