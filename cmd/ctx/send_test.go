package main

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/proto"
)

// toolAnswer answers a send with a tool call and its result around text.
func toolAnswer(r *proto.Request) []string {
	return []string{
		`{"type":"start","id":"R","run":"R"}`,
		`{"type":"tool_call","run":"R","id":"c1","name":"fs.read","arguments":{"path":"/etc/hosts","why":"to see what the machine calls itself"}}`,
		`{"type":"tool_result","run":"R","tool_call_id":"c1","content":"127.0.0.1 localhost\n"}`,
		`{"type":"delta","run":"R","text":"done reading"}`,
		`{"type":"done","run":"R","status":"ok"}`,
	}
}

// ctxOnTerminal runs ctx in-process with stdout and stderr on one
// pseudo-terminal of the given width, and returns what it showed.
func ctxOnTerminal(t *testing.T, root string, cols uint16, argv ...string) (shown string, code int) {
	t.Helper()
	ptm, pts, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptm.Close()
	if err := pty.Setsize(ptm, &pty.Winsize{Rows: 24, Cols: cols}); err != nil {
		t.Fatal(err)
	}
	read := make(chan string)
	go func() {
		b, _ := io.ReadAll(ptm) // ends with EIO once pts is closed
		read <- string(b)
	}()
	e := &clienv.Env{
		Stdin: strings.NewReader(""), Stdout: pts, Stderr: pts, Uid: 1000,
		Getenv: func(k string) string {
			if k == "CTX_ROOT" {
				return root
			}
			return ""
		},
		Interrupt: func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
	}
	code = run(e, argv)
	pts.Close()
	return strings.ReplaceAll(<-read, "\r\n", "\n"), code
}

func TestSendOnTerminalShowsRunAndTools(t *testing.T) {
	a := newFakeAgent(t, toolAnswer)
	shown, code := ctxOnTerminal(t, a.root, 40, "agent", "send", "coder", "hi")
	want := "run R\n" +
		`→ fs.read {"path":"/etc/hosts","why":"t…` + "\n" +
		"← fs.read ok, 20 bytes\n" +
		"done reading\n"
	if shown != want || code != 0 {
		t.Fatalf("shown %q\nwant  %q\ncode %d", shown, want, code)
	}
	out, errs, code := ctxRun(a.root, "", "agent", "send", "coder", "hi")
	if out != "done reading\n" || errs != "" || code != 0 {
		t.Fatalf("pipe: out %q errs %q code %d", out, errs, code)
	}
}

// Ctrl+C detaches: the message names the command that attaches again,
// with the session and the space of the send.
const hangingRun = "ctx-0123456789abcdef0123456789abcdef"

// hangingAgent answers every request with the start of hangingRun, then
// nothing until the client hangs up; it returns the root.
func hangingAgent(t *testing.T) string {
	root, ln := listenAgent(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				bufio.NewReader(c).ReadBytes('\n')
				io.WriteString(c, `{"type":"start","id":"`+hangingRun+`","run":"`+hangingRun+`"}`+"\n")
				io.Copy(io.Discard, c) // until the client hangs up
			}()
		}
	}()
	return root
}

// ctxInterrupted runs ctx in-process with a Ctrl+C after 300 ms, and
// returns its stderr and exit status.
func ctxInterrupted(root string, argv ...string) (string, int) {
	var errs strings.Builder
	e := &clienv.Env{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &errs, Uid: 1000,
		Getenv: func(k string) string {
			if k == "CTX_ROOT" {
				return root
			}
			return ""
		},
		Interrupt: func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 300*time.Millisecond)
		},
	}
	code := run(e, argv)
	return errs.String(), code
}

func TestSendInterruptNamesAttach(t *testing.T) {
	root := hangingAgent(t)
	for _, c := range []struct {
		flags        []string
		where, scope string // the scope: a run is found only in its own (TestCancelSharedRun)
	}{
		{[]string{"--session", "work"}, "--session work", ""},
		{[]string{"--shared", "team"}, "--session default --shared team", " --shared team"},
		{[]string{"--scope", "temp", "--session", "t1"}, "--session t1 --scope temp", " --scope temp"},
	} {
		errs, code := ctxInterrupted(root, append([]string{"agent", "send", "coder", "hi"}, c.flags...)...)
		want := "ctx: send: interrupted; run " + hangingRun + " goes on: ctx agent attach coder " + c.where + " " + hangingRun +
			" follows it again, ctx agent cancel coder" + c.scope + " " + hangingRun + " stops it\n"
		if code != clienv.ExitInterrupted || errs != want {
			t.Errorf("%v: code %d errs %q\nwant %q", c.flags, code, errs, want)
		}
	}
}

// Ctrl+C detaches attach again, with the same words.
func TestAttachInterrupted(t *testing.T) {
	errs, code := ctxInterrupted(hangingAgent(t), "agent", "attach", "coder", "--session", "work", hangingRun)
	want := "ctx: attach: interrupted; run " + hangingRun + " goes on: ctx agent attach coder --session work " + hangingRun +
		" follows it again, ctx agent cancel coder " + hangingRun + " stops it\n"
	if code != clienv.ExitInterrupted || errs != want {
		t.Errorf("code %d errs %q\nwant %q", code, errs, want)
	}
}
