package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/proto"
)

func runSend(e *env, p *parsed) int {
	w, err := resolve(e, p, p.args[0])
	if err != nil {
		return fail(e, "send", err, exitUsage)
	}
	input, err := readInput(e.stdin, p.args[1:])
	if err != nil {
		return fail(e, "send", err, exitUsage)
	}
	id := p.str("id")
	if id == "" {
		id = client.NewClientID()
	}
	recorded := func(run string) string { return recordedText(w, run) }
	if w.scope == abi.ScopeTemp {
		recorded = nil // a temp session has no files to read
	}
	pr := newSendPrinter(e.stdout, e.stderr, p.on("json"), recorded)
	return stream(e, w, sendRequest(w, p, id, input), pr)
}

// sendRequest builds the request; space and cwd are sent only when given,
// because the server refuses a space outside scope shared.
func sendRequest(w *where, p *parsed, id, input string) *proto.Object {
	req := proto.NewObject("op", proto.OpSend, "id", id, "session", w.session, "scope", w.scope)
	if w.scope == abi.ScopeShared {
		req.Set("space", w.loc.Space)
	}
	if cwd, ok := p.vals["cwd"]; ok {
		req.Set("cwd", cwd)
	}
	req.Set("input", input)
	return req
}

// stream sends req and prints its reply. On SIGINT it only detaches: the
// run goes on (SPEC section 7), and the message says how to stop it.
func stream(e *env, w *where, req *proto.Object, pr *sendPrinter) int {
	ctx, stop := e.interrupt()
	defer stop()
	sendErr, readErr, err := exchange(ctx, w, req, pr.frame)
	if err != nil {
		return fail(e, "send", err, exitUsage)
	}
	pr.finish()
	if ctx.Err() != nil {
		return interrupted(e, w, pr.run)
	}
	if code := pr.exitStatus(readErr); code >= 0 {
		return code
	}
	return fail(e, "send", noReply(sendErr, readErr), exitUsage)
}

// exchange sends req to the agent's socket and hands each reply frame to
// each, until the reply ends. dialErr says the server could not be
// reached. A write error is kept, not reported at once: a server that
// refuses an oversized request may close before reading it all, and its
// error frame is the better answer; readErr is nil at a clean end.
func exchange(ctx context.Context, w *where, req *proto.Object, each func(client.Frame)) (sendErr, readErr, dialErr error) {
	conn, err := client.Dial(ctx, abi.SocketPath(w.loc.Root, abi.KindAgent, w.loc.Agent))
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	sendErr = conn.Send(req)
	for {
		f, err := conn.Next()
		if err == io.EOF {
			return sendErr, nil, nil
		}
		if err != nil {
			return sendErr, err, nil
		}
		each(f)
	}
}

func noReply(sendErr, readErr error) error {
	switch {
	case sendErr != nil:
		return sendErr
	case readErr != nil:
		return readErr
	}
	return abi.Errorf(syscall.EIO, "", "the server closed the connection without a reply")
}

func interrupted(e *env, w *where, run string) int {
	if run == "" {
		fmt.Fprintln(e.stderr, "ctx: send: interrupted")
	} else {
		fmt.Fprintf(e.stderr, "ctx: send: interrupted; run %s goes on (ctx agent cancel %s %s stops it)\n", run, w.loc.Agent, run)
	}
	return exitInterrupted
}

// readInput joins the INPUT words with spaces; a word "-" is replaced by
// all of stdin, kept byte for byte (a diff's final newline matters).
func readInput(stdin io.Reader, words []string) (string, error) {
	out := make([]string, len(words))
	usedStdin := false
	for i, w := range words {
		if w != "-" {
			out[i] = w
			continue
		}
		if usedStdin {
			return "", errUsage{"only one INPUT may be - (stdin)"}
		}
		usedStdin = true
		b, err := io.ReadAll(stdin)
		if err != nil {
			return "", fmt.Errorf("read stdin: %w", err)
		}
		out[i] = string(b)
	}
	return strings.Join(out, " "), nil
}

// recordedText is the assistant text run recorded in the session, or "" if
// it cannot be read (the send already succeeded; this is only its echo).
func recordedText(w *where, run string) string {
	f, err := os.Open(w.loc.SessionFile(w.session, abi.FileMessages))
	if err != nil {
		return ""
	}
	defer f.Close()
	s, err := client.RunText(f, run)
	if err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	return s
}
