package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/agent/modelapi"
	"github.com/ctxfs/ctxfs/agent/provider"
	"github.com/ctxfs/ctxfs/agent/window"
	"github.com/ctxfs/ctxfs/proto"
)

const (
	// compactTimeout bounds a compact.d/ strategy (or the definition's
	// timeout, when shorter): it is killed then, its process group with it.
	compactTimeout = 30 * time.Second
	// maxCompactInput bounds the JSON a compact.d/ strategy reads: the
	// oldest turns are left out beyond it.
	maxCompactInput = 8 << 20
	// summarizeInstruction is the system prompt of a summarize request.
	summarizeInstruction = "You condense conversations. Summarize the conversation below (and the earlier summary it starts with, if any) so that an assistant can continue it: the user's goals, decisions taken, facts and file names that matter, open questions. Reply with the summary alone."
)

// summarize is the new summary of old (the summary in force) and turns
// (the oldest turns, cut) by the definition's strategy (SPEC 18):
// truncate keeps old; summarize asks the run's own model (one request,
// its usage emitted); a compact.d/ program reads JSON and prints the
// summary. Every summary is at most lim.SummaryBytes.
func summarize(ctx context.Context, s Spec, cfg modelapi.Config, lim window.Limits, old string, turns []modelapi.Turn, emit func(*proto.Object)) (string, error) {
	switch d := s.Def.WindowDef; d.Strategy {
	case def.CompactTruncate, "":
		return old, nil
	case def.CompactSummarize:
		return summarizeByModel(ctx, s, cfg, lim, old, turns, emit)
	default:
		return summarizeByProgram(ctx, s, lim, old, turns)
	}
}

// summarizeByModel sends the transcript (its newest part that fits the
// window with the summary's room) and takes the reply as the summary.
func summarizeByModel(ctx context.Context, s Spec, cfg modelapi.Config, lim window.Limits, old string, turns []modelapi.Turn, emit func(*proto.Object)) (string, error) {
	room := lim.Window - lim.SummaryTokens() - window.Tokens(summarizeInstruction) - 64
	text := window.Newest(transcript(old, turns), max(room, 0))
	cfg.MaxTokens = lim.SummaryTokens()
	res, err := provider.Stream(ctx, cfg, summarizeRequest(s, text), nil)
	if err != nil {
		return "", err
	}
	emit(proto.NewObject("type", proto.FrameUsage, "model", s.Def.Model, "model_id", cfg.ModelID,
		"input_tokens", res.InputTokens, "output_tokens", res.OutputTokens))
	return prefixBytes(strings.TrimSpace(res.Text), lim.SummaryBytes()), nil
}

// summarizeRequest asks for a summary of text, as s's uid (over its
// connections) and of no conversation (nothing of it is kept).
func summarizeRequest(s Spec, text string) modelapi.Request {
	return modelapi.Request{System: summarizeInstruction, Turns: []modelapi.Turn{{Role: modelapi.RoleUser, Text: text}}, Owner: modelapi.Owner{Uid: s.Uid}}
}

// transcript is the earlier summary and the turns as plain text.
func transcript(old string, turns []modelapi.Turn) string {
	var b strings.Builder
	if old != "" {
		b.WriteString(SummaryHeading + "\n" + old + "\n\n")
	}
	for _, t := range turns {
		b.WriteString(t.Role + ": " + t.Text + "\n")
		for _, c := range t.ToolCalls {
			b.WriteString("  (calls " + c.Name + " " + c.Arguments + ")\n")
		}
	}
	return b.String()
}

// prefixBytes is the start of s of at most n bytes, to a whole rune.
func prefixBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// compactInput is what a compact.d/ program reads on stdin.
type compactInput struct {
	Summary      string        `json:"summary"`       // the summary in force, "" for none
	Turns        []compactTurn `json:"turns"`         // the turns to fold in, oldest first
	SummaryBytes int           `json:"summary_bytes"` // the most it may print
}

type compactTurn struct {
	Role       string              `json:"role"`
	Text       string              `json:"text,omitempty"`
	ToolCalls  []modelapi.ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string              `json:"tool_call_id,omitempty"`
	Name       string              `json:"name,omitempty"`
	IsError    bool                `json:"is_error,omitempty"`
}

// compactJSON is the program's input: the newest turns whose JSON fits
// maxCompactInput.
func compactJSON(old string, turns []modelapi.Turn, summaryBytes int) []byte {
	in := compactInput{Summary: old, SummaryBytes: summaryBytes, Turns: []compactTurn{}}
	size := len(old) + 256
	for i := len(turns) - 1; i >= 0; i-- {
		t := turns[i]
		ct := compactTurn{Role: t.Role, Text: t.Text, ToolCalls: t.ToolCalls, ToolCallID: t.ToolCallID, Name: t.ToolName, IsError: t.IsError}
		b, _ := json.Marshal(ct)
		if size += len(b) + 1; size > maxCompactInput {
			break
		}
		in.Turns = append(in.Turns, ct)
	}
	for i, j := 0, len(in.Turns)-1; i < j; i, j = i+1, j-1 {
		in.Turns[i], in.Turns[j] = in.Turns[j], in.Turns[i]
	}
	b, _ := json.Marshal(in)
	return b
}

// summarizeByProgram runs the compact.d/ program as the session's uid
// (credentials, as the agent's program, in its own process group, the
// run's environment, cwd /): JSON on stdin, the summary on stdout. It is
// killed, its group with it, after compactTimeout (ETIMEDOUT) or once it
// prints more than the summary may hold (EFBIG); an exit other than 0 is
// EIO. Its stderr is dropped.
func summarizeByProgram(ctx context.Context, s Spec, lim window.Limits, old string, turns []modelapi.Turn) (string, error) {
	attr, err := credentials(s.Uid, s.Gid, s.Groups)
	if err != nil {
		return "", err
	}
	bound := compactTimeout
	if s.Def.Timeout > 0 && s.Def.Timeout < bound {
		bound = s.Def.Timeout
	}
	runCtx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	prog := s.Def.WindowDef.Program
	cmd := exec.CommandContext(runCtx, prog)
	cmd.Dir, cmd.Env, cmd.SysProcAttr = "/", buildEnv(s), attr
	cmd.Stdin = bytes.NewReader(compactJSON(old, turns, lim.SummaryBytes()))
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second // a grandchild holding stdout does not hold the run
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", abi.Wrap("compact", err)
	}
	if err := cmd.Start(); err != nil {
		return "", abi.Wrap("compact", err)
	}
	holdGroup(cmd.Process.Pid)
	defer dropGroup(cmd.Process.Pid)
	// At the bound the pipe is closed too: a process that left the group
	// (setsid) and kept stdout open must not hold the read.
	defer context.AfterFunc(runCtx, func() { out.Close() })()
	text, readErr := io.ReadAll(io.LimitReader(out, int64(lim.SummaryBytes())+1))
	tooMuch := len(text) > lim.SummaryBytes()
	if tooMuch {
		cancel()
	}
	waitErr := cmd.Wait()
	name := s.Def.WindowDef.Strategy
	switch {
	case tooMuch:
		return "", abi.Errorf(syscall.EFBIG, "compact", "compact.d/%s printed more than %d bytes", name, lim.SummaryBytes())
	case ctx.Err() != nil:
		return "", ctx.Err()
	case runCtx.Err() != nil:
		return "", abi.Errorf(syscall.ETIMEDOUT, "compact", "compact.d/%s did not finish within %s and was killed", name, bound)
	case waitErr != nil && !errors.Is(waitErr, exec.ErrWaitDelay):
		return "", abi.Errorf(syscall.EIO, "compact", "compact.d/%s: %v", name, waitErr)
	case readErr != nil:
		return "", abi.Wrap("compact", readErr)
	case !utf8.Valid(text):
		return "", abi.Errorf(syscall.EILSEQ, "compact", "compact.d/%s printed text that is not UTF-8", name)
	}
	return strings.TrimSpace(string(text)), nil
}
