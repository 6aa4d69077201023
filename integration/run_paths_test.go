package integration

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestProgramRunsUnderTheMount: a program run for a user gets its working
// directory, its session directory and its home as paths under the mount,
// reaches them as its own uid, and is never given a path in the store (the
// store is root's alone: it could not enter one anyway).
func TestProgramRunsUnderTheMount(t *testing.T) {
	s := newFuseServer(t)
	s.define("where", map[string]string{
		"abi":     "text",
		"program": "#!/bin/sh\npwd\necho \"$CTX_SESSION_DIR\"\necho \"$CTX_HOME\"\ncat \"$CTX_SESSION_DIR/messages.jsonl\" > /dev/null && echo readable\n",
	})
	eventually(t, 10*time.Second, "the socket of a new definition", func() bool {
		_, err := os.Stat(s.root + "/agent/where.sock")
		return err == nil
	})
	u := &cred{uid: 1001, gid: 1001}
	// The user makes the agent's tree and a working directory in root/.
	if out, err := bashAs(t, u, "mkdir -p "+s.mnt("home/1001/agent/where/root/work")); err != nil {
		t.Fatalf("mkdir through the mount: %v\n%s", err, out)
	}
	frames, raw, err := s.requestAs(u, "where", `{"op":"send","id":"p1","cwd":"/work","input":"x"}`)
	if err != nil || len(frames) == 0 || frames[len(frames)-1]["status"] != "ok" {
		t.Fatalf("send: %v\n%s\nserver log:\n%s", err, raw, lastLines(s.logText(), 20))
	}
	text := strings.TrimSpace(s.readMnt("home/1001/agent/where/session/default/latest.md"))
	want := strings.Join([]string{
		s.mnt("home/1001/agent/where/root/work"),
		s.mnt("home/1001/agent/where/session/default"),
		s.mnt("home/1001"),
		"readable",
	}, "\n")
	if text != want {
		t.Fatalf("the program saw:\n%s\nwant:\n%s", text, want)
	}
	if strings.Contains(raw, s.store) {
		t.Fatalf("a frame names the store:\n%s", raw)
	}
	if st, err := os.Stat(s.store); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("store: %v %v", st.Mode(), err)
	}
}
