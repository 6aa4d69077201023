package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/cluster/ca"
	"github.com/ctxfs/ctxfs/cluster/peer"
	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/layout"
)

// Several hosts, one store (SPEC 19): a follower host (sockets with no
// engine) relays each local connection over cluster/peer to the writer
// host, which serves it as a local request of the caller the follower
// vouched for.

// twoHosts is a writer host (an engine on store, its sockets under
// wroot, a peer listener that serves what it admits with ServeRemote)
// and a follower host (sockets under froot, no engine, forwarding to the
// writer). Both roots define the agent coder (echo).
type twoHosts struct {
	store, wroot, froot string
	writer, follower    *Sockets
}

func newTwoHosts(t *testing.T) *twoHosts { return newTwoHostsWith(t, quota.LimitConfig{}) }

// newTwoHostsWith is newTwoHosts with the writer's engine's limits.
func newTwoHostsWith(t *testing.T, limits quota.LimitConfig) *twoHosts {
	t.Helper()
	base := t.TempDir()
	for d := base; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755) // uids 1001 and 1002 reach the sockets
	}
	h := &twoHosts{store: filepath.Join(base, "store"), wroot: filepath.Join(base, "writer"), froot: filepath.Join(base, "follower")}
	for _, root := range []string{h.wroot, h.froot} {
		testkit.Must(t, os.MkdirAll(filepath.Join(root, "agent", "coder.d"), 0o755))
	}
	e, err := session.Open(session.Config{Store: h.store, Root: h.wroot, Limits: limits})
	testkit.Must(t, err)
	t.Cleanup(func() { e.Close() })
	h.writer, err = ServeSockets(e, h.wroot, nil)
	testkit.Must(t, err)
	t.Cleanup(h.writer.Close)
	alpha, beta := hostIdentities(t, base)
	l, err := peer.Listen("127.0.0.1:0", alpha, func(conn net.Conn, hello peer.Hello) {
		if peer.Admit(conn) == nil {
			h.writer.ServeRemote(conn, hello.Caller(), hello.Target())
		}
	})
	testkit.Must(t, err)
	t.Cleanup(func() { l.Close() })
	follower, err := ServeSockets(nil, h.froot, nil)
	testkit.Must(t, err)
	t.Cleanup(follower.Close)
	follower.SetForward(func(c layout.Caller, target session.Target) (net.Conn, error) {
		return peer.Dial(context.Background(), l.Addr().String(), beta, peer.HelloFor(beta.Host, c, target))
	})
	h.follower = follower
	return h
}

// hostIdentities makes a cluster CA with hosts alpha and beta at
// 127.0.0.1.
func hostIdentities(t *testing.T, base string) (alpha, beta *ca.Identity) {
	t.Helper()
	dir := filepath.Join(base, "certs")
	testkit.Must(t, ca.Init(filepath.Join(dir, "alpha"), "alpha", []string{"127.0.0.1"}))
	testkit.Must(t, ca.Issue(filepath.Join(dir, "alpha"), "beta", []string{"127.0.0.1"}, filepath.Join(dir, "beta")))
	alpha, err := ca.Load(filepath.Join(dir, "alpha"))
	testkit.Must(t, err)
	beta, err = ca.Load(filepath.Join(dir, "beta"))
	testkit.Must(t, err)
	return alpha, beta
}

// rawRequest sends lines to the socket at sock as uid (gid the same) from
// a process of that uid, and returns the reply's frames.
const rawRequest = `
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(30)
s.connect(sys.argv[1])
if len(sys.argv) > 3:  # a patient client: it waits, and its write must go through
    time.sleep(float(sys.argv[3]))
    s.sendall(sys.argv[2].encode())
else:
    try:
        s.sendall(sys.argv[2].encode())
    except (BrokenPipeError, ConnectionResetError):
        pass  # refused at once: the answer is there to read
while True:
    try:
        d = s.recv(65536)
    except ConnectionResetError:  # a refusal at once leaves the request unread
        break
    if not d:
        break
    sys.stdout.buffer.write(d)
`

func requestAs(t *testing.T, uid uint32, sock string, lines ...string) []map[string]any {
	t.Helper()
	return runRequest(t, uid, sock, strings.Join(lines, "\n")+"\n")
}

// patientRequestAs is requestAs of one line written after a pause: a
// refusal that does not read the request first fails the write (EPIPE),
// and the test.
func patientRequestAs(t *testing.T, uid uint32, sock string, pause time.Duration, line string) []map[string]any {
	t.Helper()
	return runRequest(t, uid, sock, line+"\n", fmt.Sprint(pause.Seconds()))
}

func runRequest(t *testing.T, uid uint32, sock string, args ...string) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", append([]string{"-c", rawRequest, sock}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("uid %d request to %s: %v: %s (got %q)", uid, sock, err, stderr.String(), out)
	}
	var frames []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var f map[string]any
		if err := json.Unmarshal([]byte(line), &f); err != nil {
			t.Fatalf("uid %d: reply line %q: %v", uid, line, err)
		}
		frames = append(frames, f)
	}
	return frames
}

// lastFrame is the reply's last frame, which says how it ended.
func lastFrame(t *testing.T, frames []map[string]any) map[string]any {
	t.Helper()
	if len(frames) == 0 {
		t.Fatal("no reply")
	}
	return frames[len(frames)-1]
}

func wantError(t *testing.T, what string, frames []map[string]any, code string) {
	t.Helper()
	f := lastFrame(t, frames)
	if f["type"] != "error" || f["code"] != code {
		t.Fatalf("%s: %v, want an error %s", what, frames, code)
	}
}

func wantDone(t *testing.T, what string, frames []map[string]any) {
	t.Helper()
	if f := lastFrame(t, frames); f["type"] != "done" || f["error"] != nil {
		t.Fatalf("%s: %v, want done", what, frames)
	}
}

const sendPrivate = `{"op":"send","id":"a","session":"s","input":"hello-from-beta"}`

// TestForwardedSendIsTheCallers: uid 1001's send to the follower's socket
// is written by the writer into 1001's home; a shared space of group
// 1001 takes 1001's relayed send and refuses uid 1002's with the errno a
// local request of 1002 gets at the writer (EACCES), writing nothing.
func TestForwardedSendIsTheCallers(t *testing.T) {
	h := newTwoHosts(t)
	fsock := abi.SocketPath(h.froot, abi.KindAgent, "coder")
	wsock := abi.SocketPath(h.wroot, abi.KindAgent, "coder")

	wantDone(t, "1001's relayed send", requestAs(t, 1001, fsock, sendPrivate))
	if _, err := os.Stat(filepath.Join(h.store, "home", "1001", "agent", "coder", "session", "s")); err != nil {
		t.Fatalf("1001's relayed send is not in 1001's home: %v", err)
	}
	for _, other := range []string{"0", "1002"} {
		if _, err := os.Stat(filepath.Join(h.store, "home", other, "agent", "coder")); !os.IsNotExist(err) {
			t.Fatalf("the relayed send reached home/%s: %v", other, err)
		}
	}

	root, err := layout.OpenStore(h.store)
	testkit.Must(t, err)
	testkit.Must(t, layout.AddSpace(root, "team", 1001, 0o770|os.ModeSetgid))
	root.Close()
	shared := `{"op":"send","id":"b","session":"t1","scope":"shared","space":"team","input":"for-the-team"}`
	wantDone(t, "1001's relayed send to team", requestAs(t, 1001, fsock, shared))

	// The values written behind the sends: every half second, later on a
	// loaded machine (with 700 ms of quiet, 1001's index/list was written
	// after the store had seemed settled, in a CI run beside other tests).
	before := testkit.Settled(t, h.store, nil, 2*time.Second)
	local := requestAs(t, 1002, wsock, shared)
	relayed := requestAs(t, 1002, fsock, shared)
	wantError(t, "1002's local send to team", local, "EACCES")
	wantError(t, "1002's relayed send to team", relayed, "EACCES")
	testkit.Same(t, "1002's refused sends", before, testkit.Snapshot(t, h.store, nil))
}

// TestForwardedImport: an import (its messages follow the request line on
// the connection) relayed as bytes makes 1001's session at the writer.
func TestForwardedImport(t *testing.T) {
	h := newTwoHosts(t)
	fsock := abi.SocketPath(h.froot, abi.KindAgent, "coder")
	frames := requestAs(t, 1001, fsock,
		`{"op":"import","from":"claude-code","uuid":"`+importUUID+`","messages":2}`,
		`{"role":"user","content":"q-relayed"}`,
		`{"role":"assistant","content":"a-relayed"}`)
	if f := lastFrame(t, frames); f["type"] == "error" {
		t.Fatalf("relayed import: %v", frames)
	}
	if _, err := os.Stat(filepath.Join(h.store, "home", "1001", "agent", "coder", "session", importUUID)); err != nil {
		t.Fatalf("the relayed import made no session of 1001's: %v", err)
	}
}

const importUUID = "0b0c6d2e-53f4-4b3e-9c1a-2f6f1c0e9a11"

// TestFollowerWithoutWriter: a follower with no engine and no forward
// answers EAGAIN; a forward that finds no writer answers the error it
// returns (EAGAIN); with an engine given, it serves again.
func TestFollowerWithoutWriter(t *testing.T) {
	h := newTwoHosts(t)
	fsock := abi.SocketPath(h.froot, abi.KindAgent, "coder")
	h.follower.SetForward(nil)
	wantError(t, "no engine, no forward", requestAs(t, 1001, fsock, `{"op":"ping"}`), "EAGAIN")
	wantError(t, "no engine, no forward, a client slow to write", patientRequestAs(t, 1001, fsock, 300*time.Millisecond, `{"op":"ping"}`), "EAGAIN")
	h.follower.SetForward(func(layout.Caller, session.Target) (net.Conn, error) {
		return nil, abi.Errorf(syscall.EAGAIN, "forward", "no writer host is known")
	})
	wantError(t, "a forward with no writer", requestAs(t, 1001, fsock, `{"op":"ping"}`), "EAGAIN")
	wantError(t, "a forward with no writer, a client slow to write", patientRequestAs(t, 1001, fsock, 300*time.Millisecond, `{"op":"ping"}`), "EAGAIN")
	h.follower.SetForward(nil)
	e, err := session.Open(session.Config{Store: filepath.Join(t.TempDir(), "store"), Root: h.froot})
	testkit.Must(t, err)
	t.Cleanup(func() { e.Close() })
	h.follower.SetEngine(e)
	if f := lastFrame(t, requestAs(t, 1001, fsock, `{"op":"ping"}`)); f["type"] != "pong" {
		t.Fatalf("ping with an engine: %v", f)
	}
}

// defineSleeper defines the agent sleeper at both hosts: its program
// sleeps a minute, so a send's reply holds its connection.
func (h *twoHosts) defineSleeper(t *testing.T) {
	t.Helper()
	for _, root := range []string{h.wroot, h.froot} {
		testkit.Must(t, os.MkdirAll(filepath.Join(root, "agent", "sleeper.d"), 0o755))
		testkit.Must(t, os.WriteFile(filepath.Join(root, "agent", "sleeper"), []byte("#!/bin/sh\nexec sleep 60\n"), 0o755))
	}
	// A run works in its root under the mount, which these tests have
	// not: the bare directories stand in.
	for _, uid := range []int{1001, 1002} {
		runDir := filepath.Join(h.wroot, "home", fmt.Sprint(uid), "agent", "sleeper", "root")
		testkit.Must(t, os.MkdirAll(runDir, 0o755))
		testkit.Must(t, os.Chown(runDir, uid, uid))
	}
	for _, root := range []string{h.wroot, h.froot} {
		sock := abi.SocketPath(root, abi.KindAgent, "sleeper")
		within(t, 3*rescanPeriod, "a socket at "+sock, func() bool { return isSocket(sock) })
	}
}

// sleepAs starts uid's send to the sleeper at sock, its reply held until
// the client is killed (at the latest when the test ends).
func sleepAs(t *testing.T, uid uint32, sock string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", "-c", rawRequest, sock, fmt.Sprintf(`{"op":"send","id":"z","session":"z%d","input":"sleep"}`, time.Now().UnixNano())+"\n")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	testkit.Must(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// TestRelayedConnsBounded: the writer's bound on a uid's connections
// holds for relayed ones as for local ones (EAGAIN beyond, other uids
// served), and so does the follower's own bound on a uid's relayed
// connections.
func TestRelayedConnsBounded(t *testing.T) {
	h := newTwoHostsWith(t, quota.LimitConfig{ConnsPerUid: 2})
	h.defineSleeper(t)
	fsock := abi.SocketPath(h.froot, abi.KindAgent, "sleeper")
	coder := abi.SocketPath(h.froot, abi.KindAgent, "coder")
	writerConns := h.writer.engine.Load().Limits().Conns
	sleepAs(t, 1001, fsock)
	sleepAs(t, 1001, fsock)
	within(t, 10*time.Second, "1001's two relayed sends served", func() bool { return writerConns.Held(1001) == 2 })
	wantError(t, "1001's third relayed connection", requestAs(t, 1001, coder, `{"op":"ping"}`), "EAGAIN")
	if f := lastFrame(t, requestAs(t, 1002, coder, `{"op":"ping"}`)); f["type"] != "pong" {
		t.Fatalf("1002's ping beside 1001's full quota: %v", f)
	}

	relayed := quota.New("connections", syscall.EAGAIN, 1, 16)
	h.follower.SetRelayQuota(relayed)
	sleepAs(t, 1002, fsock)
	within(t, 10*time.Second, "1002's relayed send served", func() bool {
		return relayed.Held(1002) == 1 && writerConns.Held(1002) == 1
	})
	wantError(t, "1002's second relayed connection at the follower", requestAs(t, 1002, coder, `{"op":"ping"}`), "EAGAIN")
	if writerConns.Held(1002) != 1 {
		t.Fatal("a connection refused at the follower reached the writer")
	}
}

// TestRelayedHangUp: a client of the follower that hangs up while its
// send's run goes on (the program sleeps) ends the relay and the writer's
// serving of it: both give the caller's connection back, long before the
// run ends.
func TestRelayedHangUp(t *testing.T) {
	h := newTwoHosts(t)
	h.defineSleeper(t)
	cmd := sleepAs(t, 1001, abi.SocketPath(h.froot, abi.KindAgent, "sleeper"))
	writerConns := h.writer.engine.Load().Limits().Conns
	within(t, 10*time.Second, "the send relayed and served", func() bool {
		return h.follower.relayed.Load().Held(1001) == 1 && writerConns.Held(1001) == 1
	})
	testkit.Must(t, cmd.Process.Kill())
	cmd.Wait()
	within(t, 10*time.Second, "the connection given back at both hosts", func() bool {
		return h.follower.relayed.Load().Held(1001) == 0 && writerConns.Held(1001) == 0
	})
}
