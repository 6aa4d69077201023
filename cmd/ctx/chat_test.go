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
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/proto"
)

// chatAnswer is echoAnswer, plus a refusal for the input "refuse".
func chatAnswer(r *proto.Request) []string {
	if r.Op == proto.OpSend && r.Input == "refuse" {
		return []string{`{"type":"error","code":"EINVAL","message":"send: EINVAL: no"}`}
	}
	return echoAnswer(r)
}

func (a *fakeAgent) sends() []*proto.Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*proto.Request
	for _, r := range a.reqs {
		if r.Op == proto.OpSend {
			out = append(out, r)
		}
	}
	return out
}

func TestChatLines(t *testing.T) {
	a := newFakeAgent(t, chatAnswer)
	out, errs, code := ctxRun(a.root, "one\n\n   \ntwo\r\n", "agent", "chat", "coder")
	if out != "one\ntwo\n" || errs != "" || code != 0 {
		t.Fatalf("out %q errs %q code %d", out, errs, code)
	}
	s := a.sends()
	if len(s) != 2 || s[0].Input != "one" || s[1].Input != "two" || s[0].ID == s[1].ID || s[0].Session != "default" {
		t.Fatalf("sends %+v", s)
	}
}

func TestChatExitStatus(t *testing.T) {
	for _, c := range []struct {
		in   string
		code int
	}{
		{"ok\n", 0},
		{"fail\nok\n", 1},
		{"refuse\nfail\n", 2},
		{"/bogus\n", 2},
		{"/session ../x\n", 2},
	} {
		a := newFakeAgent(t, chatAnswer)
		_, errs, code := ctxRun(a.root, c.in, "agent", "repl", "coder")
		if code != c.code {
			t.Errorf("%q: code %d, want %d; errs %q", c.in, code, c.code, errs)
		}
	}
}

func TestChatCommands(t *testing.T) {
	a := newFakeAgent(t, chatAnswer)
	dir := filepath.Join(a.root, "home/1000/agent/coder/session/work")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "messages.jsonl"), []byte(`{"role":"user","run":"R","content":"q"}`+"\n"), 0o644)
	in := "/session work\n//slash\n/history\n/session ../x\n/bogus\n/help\n/exit\nnever\n"
	out, errs, code := ctxRun(a.root, in, "agent", "chat", "coder", "--session", "first")
	if code != 2 {
		t.Errorf("code %d, want 2 (an unknown command)", code)
	}
	s := a.sends()
	if len(s) != 1 || s[0].Session != "work" || s[0].Input != "/slash" {
		t.Fatalf("sends %+v", s)
	}
	for _, want := range []string{"session work\n/slash\nuser:\nq\n", "/session [NAME]"} {
		if !strings.Contains(out, want) {
			t.Errorf("out %q lacks %q", out, want)
		}
	}
	for _, want := range []string{"ctx: chat: EINVAL: invalid session name", "unknown command /bogus"} {
		if !strings.Contains(errs, want) {
			t.Errorf("errs %q lacks %q", errs, want)
		}
	}
}

// slowAgent answers a send with start, then waits for a cancel request
// before it sends done cancelled (done ok when none came, done error when
// it named another run); it serves connections concurrently,
// since the cancel comes while the send's connection is open.
type slowAgent struct {
	root      string
	gotSend   chan struct{}
	cancelled chan string // the id of each cancel request
}

func newSlowAgent(t *testing.T) *slowAgent {
	root, ln := listenAgent(t)
	a := &slowAgent{root: root, gotSend: make(chan struct{}, 1), cancelled: make(chan string, 1)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go a.serve(c)
		}
	}()
	return a
}

func (a *slowAgent) serve(c net.Conn) {
	defer c.Close()
	line, _ := bufio.NewReader(c).ReadBytes('\n')
	req, err := proto.ParseRequest(line)
	if err != nil {
		return
	}
	if req.Op == proto.OpCancel {
		io.WriteString(c, `{"type":"cancel","run":"R","cancelled":true}`+"\n")
		a.cancelled <- req.ID
		return
	}
	io.WriteString(c, `{"type":"start","id":"R","run":"R"}`+"\n"+`{"type":"delta","run":"R","text":"part"}`+"\n")
	a.gotSend <- struct{}{}
	status := "ok" // no cancel came
	select {
	case id := <-a.cancelled:
		status = "error"               // a cancel by the wrong id
		if id == "R" || id == req.ID { // before start it can only name the send

			status = "cancelled"
		}
	case <-time.After(10 * time.Second):
	}
	io.WriteString(c, `{"type":"done","run":"R","status":"`+status+`"}`+"\n")
}

// Without a terminal, Ctrl+C cancels the run by its id, says so, and ends
// the chat with 130 without sending the following lines.
func TestChatLinesInterrupt(t *testing.T) {
	a := newSlowAgent(t)
	var o, e bytes.Buffer
	en := &clienv.Env{
		Stdin: strings.NewReader("wait\nnever\n"), Stdout: &o, Stderr: &e, Uid: 1000,
		Getenv: func(k string) string {
			if k == "CTX_ROOT" {
				return a.root
			}
			return ""
		},
		Interrupt: func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				select { // Ctrl+C once the run streams
				case <-a.gotSend:
					cancel()
				case <-ctx.Done():
				}
			}()
			return ctx, cancel
		},
	}
	done := make(chan int, 1)
	go func() { done <- run(en, []string{"agent", "chat", "coder"}) }()
	var code int
	select {
	case code = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("chat did not end")
	}
	if code != clienv.ExitInterrupted || o.String() != "part\n" || !strings.Contains(e.String(), "cancelled run R") {
		t.Fatalf("code %d out %q errs %q", code, o.String(), e.String())
	}
}

func TestChatShared(t *testing.T) {
	a := newFakeAgent(t, chatAnswer)
	if _, errs, code := ctxRun(a.root, "hi\n", "agent", "chat", "coder", "--shared", "team"); code != 0 {
		t.Fatalf("code %d errs %q", code, errs)
	}
	if r := a.last(); r.Scope != "shared" || r.Space != "team" || r.Session != "default" {
		t.Fatalf("request %+v", r)
	}
}

// A reply the server cut for falling behind ends the turn as send's does
// (chat names its turns' errors "send", as for a refusal):
// the run goes on, and the message names the attach that follows it
// again; the chat goes on to the next line, and exits 1.
func TestChatCutBehind(t *testing.T) {
	a := newFakeAgent(t, func(r *proto.Request) []string {
		if r.Op == proto.OpSend && r.Input == "long" {
			return cutReply
		}
		return chatAnswer(r)
	})
	out, errs, code := ctxRun(a.root, "long\nok\n", "agent", "chat", "coder")
	want := "ctx: send: EAGAIN: the connection fell behind run " + runB + ", which goes on: ctx agent attach coder --session default " + runB + " follows it again\n"
	if out != "b1\nok\n" || errs != want || code != 1 {
		t.Fatalf("out %q errs %q code %d", out, errs, code)
	}
}
