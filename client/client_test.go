package client

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/proto"
)

func TestFrameReader(t *testing.T) {
	in := "{\"type\":\"start\",\"run\":\"r\"}\n\n not json\n{\"type\":\"done\"}"
	fr := NewFrameReader(strings.NewReader(in))
	var got []string
	for {
		f, err := fr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if f.Obj == nil && f.Err == nil {
			t.Fatalf("frame %q: no object and no error", f.Line)
		}
		got = append(got, f.Type()+"|"+string(f.Line))
	}
	want := []string{`start|{"type":"start","run":"r"}`, "| not json", `done|{"type":"done"}`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

func TestFrameError(t *testing.T) {
	for _, c := range []struct{ line, want string }{
		{`{"type":"error","code":"EINVAL","message":"EINVAL: bad id"}`, "EINVAL: bad id"},
		{`{"type":"error","code":"EACCES","message":"cwd leaves the chroot"}`, "EACCES: cwd leaves the chroot"},
		{`{"type":"error","code":"EIO"}`, "EIO"},
		{`{"type":"error","code":"EWHAT","message":"x"}`, "EWHAT: x"},
		{`{"type":"error","code":"EINVAL","message":"send: EINVAL: reused id"}`, "EINVAL: send: reused id"},
		{`{"type":"error","code":"ENOENT","message":"space team: ENOENT"}`, "ENOENT: space team"},
	} {
		o, err := proto.ParseObject([]byte(c.line), false)
		if err != nil {
			t.Fatal(err)
		}
		if got := FrameError(o).Error(); got != c.want {
			t.Errorf("%s: got %q, want %q", c.line, got, c.want)
		}
	}
}

func TestRunText(t *testing.T) {
	log := `{"role":"user","run":"A","content":"hi","ts":"t"}
{"role":"assistant","run":"A","content":[{"type":"text","text":"one"},{"type":"tool_call","id":"c","name":"x","arguments":{}},{"type":"text","text":"two"}]}
{"role":"assistant","run":"B","content":[{"type":"text","text":"other run"}]}
{"role":"assistant","run":"A","content":"three","uid":1001}
`
	got, err := RunText(strings.NewReader(log), "A")
	if err != nil || got != "onetwo\nthree" {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestResolveSession(t *testing.T) {
	l := Loc{Root: t.TempDir(), Uid: 1000, Agent: "coder"}
	if s, err := l.ResolveSession(""); s != "default" || err != nil {
		t.Fatalf("no index: got %q, %v", s, err)
	}
	if err := os.MkdirAll(filepath.Dir(l.IndexFile("current")), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(l.IndexFile("current"), []byte("work\n"), 0o644)
	if s, err := l.ResolveSession(""); s != "work" || err != nil {
		t.Fatalf("current: got %q, %v", s, err)
	}
	if s, err := l.ResolveSession("given"); s != "given" || err != nil {
		t.Fatalf("given: got %q, %v", s, err)
	}
	if _, err := l.ResolveSession("index"); err == nil {
		t.Fatal("session index accepted")
	}
	if got := l.SessionFile("s", "state"); got != filepath.Join(l.Root, "home/1000/agent/coder/session/s/state") {
		t.Fatalf("SessionFile = %s", got)
	}
	l.Space = "team"
	if got := l.IndexFile("list"); got != filepath.Join(l.Root, "shared/team/agent/coder/session/index/list") {
		t.Fatalf("IndexFile = %s", got)
	}
}

func TestLocCheckRefusesTraversal(t *testing.T) {
	for _, l := range []Loc{{Agent: "../x"}, {Agent: "a/.."}, {Agent: "../b"}, {Agent: "a/b/c"}, {Agent: "/a"}, {Agent: "a/"}, {Agent: "ok", Space: ".."}} {
		if l.Check() == nil {
			t.Errorf("%+v accepted", l)
		}
	}
}

// A name with a slash is a model's, PROVIDER/MODEL: its socket and its
// sessions are under model/.
func TestLocOfAModel(t *testing.T) {
	l := Loc{Root: "/r", Uid: 1000, Agent: "local/mock"}
	if err := l.Check(); err != nil || l.Kind() != abi.KindModel {
		t.Fatalf("local/mock: %v, kind %s", err, l.Kind())
	}
	if got := l.Socket(); got != "/r/model/local/mock.sock" {
		t.Errorf("Socket = %s", got)
	}
	if got := l.SessionFile("s", "state"); got != "/r/home/1000/model/local/mock.d/session/s/state" {
		t.Errorf("SessionFile = %s", got)
	}
	if got := (Loc{Root: "/r", Agent: "coder"}).Socket(); got != "/r/agent/coder.sock" {
		t.Errorf("an agent's Socket = %s", got)
	}
}

func TestNewClientID(t *testing.T) {
	a, b := NewClientID(), NewClientID()
	if a == b || len(a) != len("cli-")+16 || !strings.HasPrefix(a, "cli-") {
		t.Fatalf("ids %q %q", a, b)
	}
}

// TestCall runs the protocol against a tiny socket server: one request
// line in, frames out, end of file.
func TestCall(t *testing.T) {
	sock := serve(t, func(req string) string {
		if !strings.Contains(req, `"op":"ping"`) {
			return `{"type":"error","code":"EINVAL","message":"unknown op"}` + "\n"
		}
		return `{"type":"pong"}` + "\n"
	})
	frames, err := Call(context.Background(), sock, proto.NewObject("op", "ping"))
	if err != nil || len(frames) != 1 || frames[0].Type() != "pong" || Refusal(frames) != nil {
		t.Fatalf("ping: %v, %v", frames, err)
	}
	frames, err = Call(context.Background(), sock, proto.NewObject("op", "nope"))
	if se := Refusal(frames); err != nil || se == nil || se.Code != "EINVAL" {
		t.Fatalf("refusal: %v, %v", frames, err)
	}
}

func TestDialServerDown(t *testing.T) {
	_, err := Dial(context.Background(), filepath.Join(t.TempDir(), "none.sock"))
	var de *DialError
	if !errors.As(err, &de) || !de.ServerDown() {
		t.Fatalf("got %v", err)
	}
}

// serve answers each connection's request line with reply(line).
func serve(t *testing.T, reply func(string) string) string {
	sock, ln := listen(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(c).ReadString('\n')
			io.WriteString(c, reply(line))
			c.Close()
		}
	}()
	return sock
}

// listen makes a Unix socket for a test's server, removed at its end.
func listen(t *testing.T) (string, net.Listener) {
	dir, err := os.MkdirTemp("", "ctxc") // short: socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "a.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return sock, ln
}

func TestRunStderr(t *testing.T) {
	events := `{"type":"start","run":"A"}
{"type":"log","run":"A","stream":"stderr","text":"one"}
{"type":"log","run":"B","stream":"stderr","text":"other run"}
not json "A" "log"
{"type":"log","run":"A","stream":"stdout","text":"not stderr"}
{"type":"log","run":"A","stream":"stderr","text":"two"}
{"type":"log","run":"A","stream":"stderr","text":"three"}
{"type":"done","run":"A","status":"error"}`
	got, err := RunStderr(strings.NewReader(events), "A", 2)
	if err != nil || strings.Join(got, "|") != "two|three" {
		t.Fatalf("got %q, %v", got, err)
	}
}

// TestDialWaiting: a socket that comes while its definition is expected
// to have one is dialled; without that expectation a missing socket is
// ENOENT at once (expected asked once), and an expected one that never
// comes is ENOENT after SocketWait.
// listenLater listens at p in 300 ms, as the server makes a socket:
// listening before its name appears there (bind makes the name before
// listen, and a dial between the two is refused).
func listenLater(p string) <-chan net.Listener {
	listening := make(chan net.Listener, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		ln, _ := net.Listen("unix", p+".tmp")
		if ln != nil {
			os.Rename(p+".tmp", p)
		}
		listening <- ln
	}()
	return listening
}

func TestDialWaiting(t *testing.T) {
	dir, err := os.MkdirTemp("", "ctxw") // short: socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	late := filepath.Join(dir, "late.sock")
	listening := listenLater(late)
	c, err := DialWaiting(context.Background(), late, func() bool { return true })
	if ln := <-listening; ln != nil {
		defer ln.Close()
	}
	if err != nil {
		t.Fatalf("a socket that came while waited for: %v", err)
	}
	c.Close()

	// The socket a stopped server left refuses until a starting server
	// renames its own over it.
	left := filepath.Join(dir, "left.sock")
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: left, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	if _, err := Dial(context.Background(), left); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("a stopped server's socket: %v, want ECONNREFUSED", err)
	}
	listening = listenLater(left)
	c, err = DialWaiting(context.Background(), left, func() bool { return true })
	if ln := <-listening; ln != nil {
		defer ln.Close()
	}
	if err != nil {
		t.Fatalf("a refusing socket replaced while waited for: %v", err)
	}
	c.Close()

	asked := 0
	_, err = DialWaiting(context.Background(), filepath.Join(dir, "none.sock"), func() bool { asked++; return false })
	if !errors.Is(err, syscall.ENOENT) || asked != 1 {
		t.Errorf("not expected: %v, expected asked %d times, want ENOENT and once", err, asked)
	}
	start := time.Now()
	_, err = DialWaiting(context.Background(), filepath.Join(dir, "never.sock"), func() bool { return true })
	if !errors.Is(err, syscall.ENOENT) || time.Since(start) < SocketWait {
		t.Errorf("expected, never there: %v after %v, want ENOENT after %v", err, time.Since(start), SocketWait)
	}
}
