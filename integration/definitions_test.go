package integration

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// socketGone bounds how long a removed definition may keep its socket: the
// server removes it as soon as inotify says the directory went, and its
// periodic rescan (a second) is the fallback.
const socketGone = 3 * time.Second

// isSocketAt reports whether a socket is at p.
func isSocketAt(p string) bool {
	st, err := os.Lstat(p)
	return err == nil && st.Mode().Type() == os.ModeSocket
}

// staleSocket leaves a socket at p that no one listens on, as a server
// that died leaves its sockets.
func staleSocket(t *testing.T, p string) {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
	testkit.Must(t, err)
	l.SetUnlinkOnClose(false)
	l.Close()
	t.Cleanup(func() { os.Remove(p) })
}

// TestDefinitionThenSendBackToBack: the README's lines typed back to back
// in a shell (mkdir the definition, write its model, send to it) answer
// at once, 20 times in a row with fresh names: send waits for the socket
// of a definition that exists (before, it failed with "has no socket"
// until the server's next scan, 0.5 s later).
func TestDefinitionThenSendBackToBack(t *testing.T) {
	s := newFuseServer(t)
	env := []string{"PATH=" + filepath.Dir(ctxBin) + ":/usr/local/bin:/usr/bin:/bin", "CTX_ROOT=" + s.root, "R=" + s.root}
	for i := range 20 {
		name := fmt.Sprintf("quick%d", i)
		script := fmt.Sprintf(`mkdir -p $R/agent/%[1]s.d && echo debug/echo > $R/agent/%[1]s.d/model && ctx agent send %[1]s hello`, name)
		out, err := runCmd(t, nil, env, "/bin/bash", "-c", script)
		if err != nil || !strings.Contains(out, "hello") {
			t.Fatalf("try %d: %q: %v\n%s", i, script, err, out)
		}
	}
}

// TestRemovedDefinitionLosesSocket: removing an agent's or a model's
// definition removes its socket at once (before, it stayed until the
// server stopped); a connection to the old path is refused; a request on
// a connection accepted before the definition went, and a send through
// ctx after, say the agent is not defined, naming no host path (before:
// "stat /…/agent/gone.d: no such file or directory"); nothing is written.
func TestRemovedDefinitionLosesSocket(t *testing.T) {
	s := newFuseServer(t)
	s.define("gone", map[string]string{"model": "debug/echo"})
	agentSock := filepath.Join(s.root, "agent/gone.sock")
	// A provider made while the server runs is watched too.
	modelDef := filepath.Join(s.root, "model/acme/m1.d")
	testkit.Must(t, os.MkdirAll(modelDef, 0o755))
	modelSock := filepath.Join(s.root, "model/acme/m1.sock")
	eventually(t, 10*time.Second, "the sockets of gone and acme/m1", func() bool {
		return isSocketAt(agentSock) && isSocketAt(modelSock)
	})
	s.mustRequest("gone", `{"op":"send","id":"g1","session":"g","input":"while defined"}`)
	early, err := net.Dial("unix", agentSock)
	testkit.Must(t, err)
	defer early.Close()
	time.Sleep(200 * time.Millisecond) // for the server to accept it: a connection still queued is reset when its listener closes
	settle()                           // the derived files of g1 reach the store, before the snapshot
	before := hostSnapshot(t, s.store)

	testkit.Must(t, os.RemoveAll(filepath.Join(s.root, "agent/gone.d")))
	testkit.Must(t, os.RemoveAll(modelDef))
	eventually(t, socketGone, "no socket left for gone and acme/m1", func() bool {
		return !isSocketAt(agentSock) && !isSocketAt(modelSock)
	})
	for _, p := range []string{agentSock, modelSock} {
		_, err := net.Dial("unix", p)
		if !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("connect %s after its definition went: %v, want ENOENT or ECONNREFUSED", p, err)
		}
	}

	fmt.Fprintf(early, `{"op":"send","id":"g2","session":"g","input":"after"}`+"\n")
	early.SetReadDeadline(time.Now().Add(20 * time.Second))
	line, _ := bufio.NewReader(early).ReadString('\n')
	var f map[string]any
	if json.Unmarshal([]byte(line), &f) != nil || f["type"] != "error" || f["code"] != "ENOENT" ||
		f["message"] != `ENOENT: agent "gone" is not defined` {
		t.Errorf("a request after the definition went: %q, want the one error frame ENOENT: agent \"gone\" is not defined", line)
	}

	out, errs, code := ctxSplit(t, s, "agent", "send", "gone", "--session", "g", "after")
	if code != 2 || out != "" || errs != "ctx: send: ENOENT: no agent \"gone\" (ctx agent list shows the agents)\n" {
		t.Errorf("ctx agent send to a removed definition: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if strings.Contains(errs+line, s.root) || strings.Contains(errs+line, "stat ") {
		t.Errorf("a host path in the refusal: %q %q", line, errs)
	}
	if diffs, _ := hostDiffs(before, hostSnapshot(t, s.store)); len(diffs) > 0 {
		t.Errorf("refused sends wrote to the store: %v", diffs)
	}
}

// TestStaleSocketsRemovedAtStart: a server that died leaves its sockets;
// the next one removes those whose definition is gone (before, they stayed
// for good), and only sockets: a file under such a name stays.
func TestStaleSocketsRemovedAtStart(t *testing.T) {
	s := newServer(t)
	ghost := filepath.Join(s.root, "agent/ghost.sock")
	staleSocket(t, ghost)
	notSocket := filepath.Join(s.root, "agent/plain.sock")
	testkit.Must(t, os.WriteFile(notSocket, []byte("mine\n"), 0o644))
	s.restart(syscall.SIGKILL)
	if isSocketAt(ghost) {
		t.Errorf("%s: a stale socket of no definition outlived the restart", ghost)
	}
	if b, err := os.ReadFile(notSocket); err != nil || string(b) != "mine\n" {
		t.Errorf("%s, not a socket, changed: %q %v", notSocket, b, err)
	}
	if !isSocketAt(filepath.Join(s.root, "agent/coder.sock")) {
		t.Errorf("coder lost its socket")
	}
}

// TestDoctorDefinitionSockets: ctx doctor run right after a definition is
// made finds its socket (it waits for it); a definition whose socket
// something else is in the way of, and a socket left without its
// definition, are each reported with their fix (before, the stale socket
// passed as "no problems found"), and send to the former says what is in
// its way; the doctor is clean once they are fixed.
func TestDoctorDefinitionSockets(t *testing.T) {
	s := newFuseServer(t)
	fresh := filepath.Join(s.root, "agent/fresh.d")
	testkit.Must(t, os.MkdirAll(fresh, 0o755))
	testkit.Must(t, os.WriteFile(filepath.Join(fresh, "model"), []byte("debug/echo\n"), 0o644))
	out, code := doctor(t, s, nil)
	if code != 0 || !strings.HasSuffix(out, "no problems found\n") {
		t.Errorf("right after a definition was made: exit %d\n%s", code, out)
	}
	wantFinding(t, "a new definition", out, "ok: socket "+filepath.Join(s.root, "agent/fresh.sock")+" (answers ping)")

	blocked := filepath.Join(s.root, "agent/blocked.sock")
	testkit.Must(t, os.Mkdir(blocked, 0o755))
	s.define("blocked", map[string]string{"model": "debug/echo"})
	ghost := filepath.Join(s.root, "agent/ghost.sock")
	staleSocket(t, ghost)
	out, code = doctor(t, s, nil)
	if code != 1 || !strings.HasSuffix(out, "2 problem(s) found\n") {
		t.Errorf("a socket in the way and a stale one: exit %d, want 1 and 2 problems\n%s", code, out)
	}
	wantFinding(t, "a socket in the way", out, "problem: socket "+blocked+": missing: something that is not a socket is in its way\n"+
		"  fix: remove it (rm -r "+blocked+"); the server then makes the socket")
	wantFinding(t, "a stale socket", out, "problem: socket "+ghost+": no definition: "+filepath.Join(s.root, "agent/ghost.d")+
		" does not exist: left behind by a server that stopped\n  fix: rm "+ghost)

	// Not "ctxfs is not running", as a refused connection used to say.
	out, errs, code := ctxSplit(t, s, "agent", "send", "blocked", "hi")
	if code != 2 || out != "" || errs != "ctx: send: ECONNREFUSED: agent \"blocked\" has no socket: something else is in its place (ctx doctor says how to fix it)\n" {
		t.Errorf("send to a definition without its socket: exit %d, stdout %q, stderr %q", code, out, errs)
	}

	testkit.Must(t, os.Remove(blocked))
	testkit.Must(t, os.Remove(ghost))
	out, code = doctor(t, s, nil)
	if code != 0 || !strings.HasSuffix(out, "no problems found\n") {
		t.Errorf("once fixed: exit %d\n%s", code, out)
	}
	wantFinding(t, "once fixed", out, "ok: socket "+blocked+" (answers ping)")
}
