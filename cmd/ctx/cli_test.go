package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/proto"
)

// fakeAgent is a tiny agent socket for unit tests of the client protocol:
// it parses each request with the server's own parser and answers with
// the frames answer returns. It is not a model of the server's rules.
type fakeAgent struct {
	root string
	mu   sync.Mutex
	reqs []*proto.Request
}

func newFakeAgent(t *testing.T, answer func(*proto.Request) []string) *fakeAgent {
	root, ln := listenAgent(t)
	a := &fakeAgent{root: root}
	go a.serve(ln, answer)
	return a
}

// listenAgent makes a root directory with the socket agent/coder.sock
// listening; both go when the test ends.
func listenAgent(t *testing.T) (root string, ln net.Listener) {
	root, err := os.MkdirTemp("", "ctx") // short: socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	os.MkdirAll(filepath.Join(root, "agent"), 0o755)
	ln, err = net.Listen("unix", filepath.Join(root, "agent", "coder.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return root, ln
}

func (a *fakeAgent) serve(ln net.Listener, answer func(*proto.Request) []string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		line, _ := bufio.NewReader(c).ReadBytes('\n')
		req, err := proto.ParseRequest(line)
		if err != nil {
			c.Write(proto.ErrorFrame(err).Line())
		} else {
			a.mu.Lock()
			a.reqs = append(a.reqs, req)
			a.mu.Unlock()
			io.WriteString(c, strings.Join(answer(req), "\n")+"\n")
		}
		c.Close()
	}
}

func (a *fakeAgent) last() *proto.Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reqs[len(a.reqs)-1]
}

// ctxRun runs ctx in-process with CTX_ROOT=root.
func ctxRun(root, stdin string, argv ...string) (out, errs string, code int) {
	var o, e bytes.Buffer
	en := &clienv.Env{
		Stdin: strings.NewReader(stdin), Stdout: &o, Stderr: &e, Uid: 1000,
		Getenv: func(k string) string {
			if k == "CTX_ROOT" {
				return root
			}
			return ""
		},
		Interrupt: func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
	}
	code = run(en, argv)
	return o.String(), e.String(), code
}

func echoAnswer(r *proto.Request) []string {
	switch r.Op {
	case proto.OpCancel:
		return []string{`{"type":"cancel","run":"` + r.ID + `","cancelled":false,"stale":true}`}
	case proto.OpStatus:
		return []string{`{"type":"status","session":"` + r.Session + `","state":"active","runs":[{"run":"ctx-1","phase":"running"}],"updated_at":1700000000,"window":{"tokens":250,"limit":1000,"window":1250,"compact_at":800}}`}
	case proto.OpCompact:
		return []string{`{"type":"compacted","cursor":4096,"summary_bytes":120,"kept_turns":3,"strategy":"truncate"}`}
	}
	if r.Input == "fail" {
		return []string{`{"type":"start","id":"R","run":"R"}`, `{"type":"done","run":"R","status":"error"}`}
	}
	return []string{`{"type":"start","id":"R","run":"R"}`, `{"type":"delta","run":"R","text":"` + r.Input + `"}`, `{"type":"done","run":"R","status":"ok"}`}
}

func TestSendOverSocket(t *testing.T) {
	a := newFakeAgent(t, echoAnswer)
	out, errs, code := ctxRun(a.root, "", "agent", "send", "coder", "hello", "world", "--cwd", "/w")
	if out != "hello world\n" || errs != "" || code != 0 {
		t.Fatalf("out %q errs %q code %d", out, errs, code)
	}
	r := a.last()
	if r.Session != "default" || r.Scope != "private" || r.Cwd != "/w" || !strings.HasPrefix(r.ID, "cli-") {
		t.Fatalf("request %+v", r)
	}
	_, _, code = ctxRun(a.root, "", "agent", "send", "--shared", "team", "--id", "job-1", "coder", "fail")
	if r := a.last(); code != 1 || r.Scope != "shared" || r.Space != "team" || r.ID != "job-1" {
		t.Fatalf("code %d request %+v", code, r)
	}
}

func TestSendStdin(t *testing.T) {
	a := newFakeAgent(t, echoAnswer)
	ctxRun(a.root, "diff\n", "agent", "send", "coder", "review:", "-")
	if got := a.last().Input; got != "review: diff\n" {
		t.Fatalf("input %q", got)
	}
}

func TestSendRefused(t *testing.T) {
	a := newFakeAgent(t, echoAnswer)
	_, errs, code := ctxRun(a.root, "", "agent", "send", "coder", "--cwd", "relative", "hi")
	if code != 2 || !strings.HasPrefix(errs, "ctx: send: EINVAL") {
		t.Fatalf("errs %q code %d", errs, code)
	}
}

// With no server, send says that ctxfs is not running and how to start
// it, without the socket's path; exit 2 (nothing ran).
func TestSendServerDown(t *testing.T) {
	root := t.TempDir()
	for _, c := range []struct {
		setup func()
		want  string
	}{
		{func() {}, `ENOENT: ctxfs is not running at ` + root + ` (ctxfs mount starts it), and no agent "coder" is defined there`},
		{func() { os.MkdirAll(filepath.Join(root, "agent/coder.d"), 0o755) }, `ENOENT: ctxfs is not running at ` + root + ` (ctxfs mount starts it)`},
		{func() { staleSocket(t, filepath.Join(root, "agent/coder.sock")) }, `ECONNREFUSED: ctxfs is not running (ctxfs mount starts it)`},
	} {
		c.setup()
		_, errs, code := ctxRun(root, "", "agent", "send", "coder", "hi")
		if code != 2 || errs != "ctx: send: "+c.want+"\n" {
			t.Errorf("errs %q code %d, want %q", errs, code, c.want)
		}
	}
}

// staleSocket leaves a socket file that nothing listens on, as a killed
// server does.
func staleSocket(t *testing.T, path string) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
}

func TestSessionFromIndexCurrent(t *testing.T) {
	a := newFakeAgent(t, echoAnswer)
	idx := filepath.Join(a.root, "home/1000/agent/coder/session/index")
	os.MkdirAll(idx, 0o755)
	os.WriteFile(filepath.Join(idx, "current"), []byte("work\n"), 0o644)
	ctxRun(a.root, "", "agent", "send", "coder", "hi")
	if s := a.last().Session; s != "work" {
		t.Fatalf("session %q, want work", s)
	}
	ctxRun(a.root, "", "agent", "send", "coder", "--session", "other", "hi")
	if s := a.last().Session; s != "other" {
		t.Fatalf("session %q, want other", s)
	}
	ctxRun(a.root, "", "agent", "send", "coder", "--scope", "temp", "hi")
	if s := a.last().Session; s != abi.DefaultSession {
		t.Fatalf("temp session %q, want default", s)
	}
}

func TestStatusAndCancel(t *testing.T) {
	a := newFakeAgent(t, echoAnswer)
	out, _, code := ctxRun(a.root, "", "agent", "status", "coder")
	want := "session: default\nstate: active\nupdated_at: 1700000000 (2023-11-14T22:13:20Z)\nrun: ctx-1 running\n" +
		"window: 250 of 1000 tokens (25%), compacts at 800; the model's window 1250, less the reply's reserve\n"
	if out != want || code != 0 {
		t.Fatalf("status out %q code %d", out, code)
	}
	out, _, code = ctxRun(a.root, "", "agent", "cancel", "coder", "job-1")
	if out != "not running: job-1 (stale)\n" || code != 1 {
		t.Fatalf("cancel out %q code %d", out, code)
	}
	_, errs, code := ctxRun(a.root, "", "agent", "cancel", "coder", "bad id!")
	if code != 2 || !strings.HasPrefix(errs, "ctx: cancel: EINVAL") {
		t.Fatalf("bad cancel errs %q code %d", errs, code)
	}
}

func TestUsage(t *testing.T) {
	for _, argv := range [][]string{{}, {"agent"}, {"agent", "send", "coder"}, {"agent", "bogus"}, {"agent", "send", "../x", "hi"}} {
		if _, errs, code := ctxRun(t.TempDir(), "", argv...); code != 2 || errs == "" {
			t.Errorf("%q: code %d errs %q", argv, code, errs)
		}
	}
	if out, _, code := ctxRun("", "", "help"); code != 0 || !strings.Contains(out, "ctx agent send AGENT") {
		t.Errorf("help: code %d out %q", code, out)
	}
	if out, _, code := ctxRun("", "", "agent", "history", "--help"); code != 0 || !strings.Contains(out, "ctx agent history AGENT [flags]") {
		t.Errorf("history --help: code %d out %q", code, out)
	}
}

func TestFileCommands(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "home/1000/agent/coder/session")
	os.MkdirAll(filepath.Join(dir, "s1"), 0o755)
	os.MkdirAll(filepath.Join(dir, "index"), 0o755)
	os.WriteFile(filepath.Join(dir, "index/list"), []byte("s1\ndefault\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "index/current"), []byte("s1\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "s1/latest.md"), []byte("answer\n"), 0o644)
	msgs := `{"role":"user","run":"R","content":"q"}` + "\n"
	os.WriteFile(filepath.Join(dir, "s1/messages.jsonl"), []byte(msgs), 0o644)
	for _, c := range []struct {
		argv []string
		out  string
		code int
	}{
		{[]string{"agent", "output", "coder"}, "answer\n", 0},
		{[]string{"agent", "history", "coder", "--json"}, msgs, 0},
		{[]string{"agent", "history", "coder"}, "user:\nq\n", 0},
		{[]string{"agent", "session", "list", "coder"}, "s1\ndefault\n", 0},
		{[]string{"agent", "output", "coder", "--session", "nope"}, "", 1},
	} {
		out, errs, code := ctxRun(root, "", c.argv...)
		if out != c.out || code != c.code {
			t.Errorf("%q: out %q errs %q code %d", c.argv, out, errs, code)
		}
	}
}

// TestCompact: ctx agent compact sends the op compact for the session and
// prints what was kept.
func TestCompact(t *testing.T) {
	a := newFakeAgent(t, echoAnswer)
	out, errs, code := ctxRun(a.root, "", "agent", "compact", "coder", "--session", "long")
	want := "strategy: truncate\ncursor: 4096\nsummary_bytes: 120\nkept_turns: 3\n"
	if out != want || errs != "" || code != 0 {
		t.Fatalf("out %q errs %q code %d", out, errs, code)
	}
	if r := a.last(); r.Op != proto.OpCompact || r.Session != "long" || r.Scope != "private" {
		t.Fatalf("request %+v", r)
	}
	if _, errs, code := ctxRun(a.root, "", "agent", "compact"); code != 2 || errs == "" {
		t.Fatalf("no agent: code %d errs %q", code, errs)
	}
}
