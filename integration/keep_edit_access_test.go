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

// TestKeptEditNeedsWriteAccess: a CLI's edit is kept before it is made
// (SPEC 17), as the run's uid; the run's program names the file on its
// control socket (permit), so it may name any. uid 1001's program named
// a file in uid 1002's directory, which uid 1001 may read but not write:
// the edit could never be made, yet its absence was kept as a create of
// the run, and uid 1002's restore of that run in the shared session
// removed uid 1002's own file made since. Now a kept edit must be one the
// uid may make (the file opened for writing, or for a new file its
// directory writable): EACCES, the edit denied, nothing kept.
func TestKeptEditNeedsWriteAccess(t *testing.T) {
	base := tmpDirForAll(t, "ctxfs-keep-")
	bob := filepath.Join(base, "bob")
	testkit.Must(t, os.Mkdir(bob, 0o755))
	testkit.Must(t, os.Chown(bob, 1002, 1002))
	target := filepath.Join(bob, "notes")
	s := newServerWith(t, func(s *server) {
		s.define("editor", map[string]string{"program": fmt.Sprintf(`#!/bin/sh
python3 -c '
import json, os, socket, sys
c = socket.socket(socket.AF_UNIX)
c.connect(os.environ["CTX_CONTROL_SOCKET"])
c.sendall(json.dumps({"op": "permit", "id": "t1", "name": "Write", "arguments": {"file_path": %q, "content": "x"}}).encode() + b"\n")
c.settimeout(3)
try:
    print(c.recv(65536).decode(), file=sys.stderr)
except OSError as e:
    print(e, file=sys.stderr)
'
echo '{"type":"message","role":"assistant","content":"asked"}'
`, target)})
	})
	s.spaceAdd("team", 1234)
	a, b := &cred{uid: 1001, gid: 1001, groups: []uint32{1234}}, &cred{uid: 1002, gid: 1002, groups: []uint32{1234}}
	frames, raw, err := s.requestAsWithin(a, "editor", `{"op":"send","id":"s1","session":"plan","scope":"shared","space":"team","input":"edit"}`, 60*time.Second)
	if d := lastDone(frames); err != nil || d == nil {
		t.Fatalf("send: %v\n%s", err, raw)
	}
	run := frames[0]["run"].(string)
	index := filepath.Join(s.root, "shared", "team", "agent", "editor", "session", "plan", "versions", "index.jsonl")
	kept, _ := runCmd(t, a, nil, "cat", index)
	testkit.Must(t, os.WriteFile(target, []byte("uid 1002's\n"), 0o644))
	testkit.Must(t, os.Chown(target, 1002, 1002))
	_, raw, err = s.requestAsWithin(b, "editor", fmt.Sprintf(`{"op":"restore","id":"x1","session":"plan","scope":"shared","space":"team","run":%q}`, run), 60*time.Second)
	if got, _ := os.ReadFile(target); string(got) != "uid 1002's\n" {
		t.Fatalf("uid 1002's file after its restore of uid 1001's run: %q (err %v)\nversions:\n%s\nrestore:\n%.800s", got, err, kept, raw)
	}
	if strings.Contains(kept, target) {
		t.Errorf("an edit uid 1001 could not make was kept:\n%s", kept)
	}
}
