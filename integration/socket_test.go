package integration

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// A request over 1 MiB is EMSGSIZE; an unknown op EINVAL; neither writes.
func TestSocketRefusals(t *testing.T) {
	s := newServer(t)
	s.mustRequest("coder", `{"op":"send","id":"c0","input":"x"}`)
	settle() // the derived files reach the store behind
	before := snapshot(t, s.store)
	big := `{"op":"send","id":"c1","input":"` + strings.Repeat("x", 1<<20) + `"}`
	cases := map[string]string{
		big:                                   "EMSGSIZE",
		`{"op":"launch"}`:                     "EINVAL",
		`not json`:                            "EINVAL",
		`{"op":"send","id":"c1"}`:             "EINVAL",
		`{"op":"send","id":"c0","input":"y"}`: "EINVAL", // payload reuse
		`{"op":"send","id":"c2","input":"a\u0000"}`: "EINVAL",
	}
	for line, code := range cases {
		frames := s.mustRequest("coder", line)
		if len(frames) != 1 || frames[0]["type"] != "error" || frames[0]["code"] != code {
			t.Errorf("%.60s…: %v, want one error frame %s", line, frames, code)
		}
	}
	testkit.Same(t, "refused requests", before, snapshot(t, s.store))
}

// The caller's uid comes from SO_PEERCRED: a send by uid 1001 lands in
// home/1001, owned by 1001, whatever the request says.
func TestSocketPeerCredentials(t *testing.T) {
	s := newServer(t)
	sock := filepath.Join(s.root, "agent", "coder.sock")
	st, err := os.Stat(sock)
	testkit.Must(t, err)
	if st.Mode().Perm() != 0o666 || st.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket mode %v, want a 0666 socket", st.Mode())
	}
	py := `import socket,sys
s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
s.sendall(b'{"op":"send","id":"u1","input":"from 1001"}\n')
print(s.makefile().read(), end="")`
	cmd := exec.Command("/usr/bin/python3", "-c", py, sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"type":"done"`) {
		t.Fatalf("send as 1001: %v\n%s", err, out)
	}
	// The session is 1001's as the mount shows it (the store holds it as
	// root's history: history_owner_test.go).
	dir := s.mnt("home/1001/agent/coder/session/default")
	for _, p := range []string{s.mnt("home/1001"), dir, filepath.Join(dir, "messages.jsonl")} {
		st, err := os.Stat(p)
		testkit.Must(t, err)
		if uid := st.Sys().(*syscall.Stat_t).Uid; uid != 1001 {
			t.Errorf("%s owned by %d, want 1001", p, uid)
		}
	}
	if _, err := os.Stat(s.sessionDir(0, "coder", "default")); !os.IsNotExist(err) {
		t.Errorf("a send by 1001 touched root's home: %v", err)
	}
}

// Model sockets, and definitions added while the server runs.
func TestModelAndNewDefinitionSockets(t *testing.T) {
	s := newServer(t)
	conn, err := net.Dial("unix", filepath.Join(s.root, "model", "debug", "echo.sock"))
	testkit.Must(t, err)
	conn.Write([]byte(`{"op":"send","id":"m1","input":"to the model"}` + "\n"))
	var out bytes.Buffer
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	out.ReadFrom(conn)
	conn.Close()
	if !strings.Contains(out.String(), `"status":"ok"`) {
		t.Fatalf("model send: %s", out.String())
	}
	msgs := fileBytes(t, filepath.Join(s.store, "home/0/model/debug/echo.d/session/default/messages.jsonl"))
	if !strings.Contains(msgs, "to the model") {
		t.Fatalf("model session messages: %s", msgs)
	}
	s.define("late", map[string]string{"model": "debug/echo"})
	deadline := time.Now().Add(5 * time.Second)
	for {
		frames, err := s.request("late", `{"op":"ping"}`)
		if err == nil && len(frames) == 1 && frames[0]["type"] == "pong" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no socket for a definition added while running: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fsck: silent and 0 on a clean store; one "<path>: <what>" line per
// problem and 1 on a damaged one; --repair does not hide damage.
func TestFsckExitAndLines(t *testing.T) {
	s := newServer(t)
	for i := 0; i < 3; i++ {
		s.mustRequest("coder", fmt.Sprintf(`{"op":"send","id":"c%d","session":"s%d","input":"x"}`, i, i))
	}
	if out, code := s.fsck(); code != 0 || out != "clean\n" {
		t.Fatalf("clean store: exit %d, output %q", code, out)
	}
	settle() // the derived files reach the store behind, before s2's state is forged
	p := filepath.Join(s.sessionDir(0, "coder", "s1"), "events.jsonl")
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	testkit.Must(t, err)
	f.WriteString(`{"forged":true}` + "\n")
	f.Close()
	testkit.Must(t, os.WriteFile(filepath.Join(s.sessionDir(0, "coder", "s2"), "state"), []byte("bogus\n"), 0o600))
	// --repair replays the journal and cuts: never under a live server.
	if out, code := s.fsck("--repair"); code != 2 || !strings.Contains(out, "is served by") {
		t.Fatalf("fsck --repair of a served store: exit %d\n%s", code, out)
	}
	s.kill(s.cmd, syscall.SIGTERM)
	for _, args := range [][]string{nil, {"--repair"}} {
		out, code := s.fsck(args...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 1 || len(lines) != 2 || !strings.HasPrefix(lines[0], p+": ") && !strings.HasPrefix(lines[1], p+": ") {
			t.Fatalf("fsck %v: exit %d\n%s", args, code, out)
		}
	}
}
