package prompt

import (
	"sort"

	"github.com/ctxfs/ctxfs/agent/modelapi"
	"github.com/ctxfs/ctxfs/agent/window"
	"github.com/ctxfs/ctxfs/proto"
)

// Prompt is a model API run's request as the engine hands it to a run
// (agent.Spec.Prompt), so that the engine needs no provider of its own: the
// system prompt and the conversation after the summary's cursor, the
// summary in force (SPEC 18: context/summary.md), each turn's message id,
// and where a new summary is kept.
type Prompt struct {
	modelapi.Request
	Summary string        // the summary of what came before Turns; "" for none
	Cursor  window.Cursor // the last message Summary covers (End 0: none)
	// Lines are the messages.jsonl lines of Turns, one each, in order:
	// where a cut falls, the cursor names the last line cut.
	Lines []Line
	// Older are the lines after the cursor and before Turns, not read:
	// the newer turns fill the window already (New's budget), so
	// the run compacts these first, and reads them only for a strategy
	// that summarizes them.
	Older []Line
	// TurnTokens is window.TurnTokens of Turns, summed (each line's count
	// is kept with the read log, so a long prompt's turns are not counted
	// again at each request: agent's runWindow.turnTokens).
	TurnTokens int
	// Keep writes context/summary.md (window.FormatSummary); nil keeps
	// nothing (the summary then lives in the run alone).
	Keep func(data []byte) error
}

// Line is one message line of messages.jsonl: where it ends (the
// message's id) and its bytes without the newline.
type Line struct {
	End  int64
	Text []byte
}

// Cursor is the cursor that names this line.
func (l Line) Cursor() window.Cursor { return window.Cursor{End: l.End, Hash: window.LineHash(l.Text)} }

// New is a model API run's request (SPEC 10, 18): system as the
// system prompt, and the messages of log (the end of a session's
// messages.jsonl, whole lines, starting at byte offset start of it) as the
// conversation, in order; a line that is not a message is left out.
// summary is context/summary.md as read (nil when missing): when its
// cursor names a line of this history, the conversation is what follows
// it and the summary goes before; a cursor that does not match (another
// history, a file someone edited) is ignored, and the summary is rebuilt
// when the conversation next needs compacting. Lines are read from the
// newest until their turns take more than budget tokens (0: all): older
// ones could not be sent with them (Older). The request is owner's (its
// uid and conversation): what is kept of it between prompts and requests
// serves that owner's alone (modelapi.Owner).
func (m *Memos) New(owner modelapi.Owner, system string, log []byte, start int64, summary []byte, budget int) *Prompt {
	p := &Prompt{Request: modelapi.Request{System: system, Owner: owner}}
	m.logs.lines(owner.Uid, log, start, func(v *logView) { p.read(v, summary, budget) })
	return p
}

// LogSource is a log as the engine holds it (a session's sealedlog.Log):
// its Size, the bytes below it, and Changes, which counts the times the
// bytes below Size may have changed. Between two calls that return the
// same Changes the log only grew.
type LogSource interface {
	Size() int64
	ReadAt(p []byte, off int64) (int, error)
	Changes() uint64
}

// NewFrom is New of src's last max bytes (from the first line
// that starts in them). The read logs keep what they read of src by its
// identity, so a session's next prompt reads only the bytes appended
// since, instead of the whole tail read and compared byte for byte
// (docs/benchmarks.md, "The log itself").
func (m *Memos) NewFrom(owner modelapi.Owner, system string, src LogSource, max int64, summary []byte, budget int) *Prompt {
	p := &Prompt{Request: modelapi.Request{System: system, Owner: owner}}
	m.logs.source(owner.Uid, src, max, func(v *logView) { p.read(v, summary, budget) })
	return p
}

// read fills p from the log's lines (New).
func (p *Prompt) read(v *logView, summary []byte, budget int) {
	c, text, ok := window.ParseSummary(summary)
	if ok && v.names(c) {
		p.Summary, p.Cursor = text, c
	}
	first := sort.Search(v.Len(), func(i int) bool { return v.End(i) > p.Cursor.End })
	if turns, lines, tokens, ok := v.grownCut(first, budget); ok {
		p.Turns, p.Lines, p.TurnTokens = turns, lines, tokens
		return
	}
	// Which lines fit is counted from the newest first; they are then
	// taken in order into slices of their exact size, neither grown
	// nor reversed (docs/benchmarks.md, "The prompt's slices").
	used, n, i := 0, 0, v.Len()
	for i > first && (budget == 0 || used <= budget) {
		i--
		if _, tokens, ok := v.Turn(i); ok {
			n++
			used += tokens
		}
	}
	p.TurnTokens = used
	if n > 0 { // with none, Turns and Lines stay nil
		p.Turns, p.Lines = make([]modelapi.Turn, 0, n), make([]Line, 0, n)
	}
	for k := i; k < v.Len(); k++ {
		if t, _, ok := v.Turn(k); ok {
			p.Turns = append(p.Turns, t)
			p.Lines = append(p.Lines, v.Line(k))
		}
	}
	if i > first {
		p.Older = make([]Line, 0, i-first)
		for k := first; k < i; k++ {
			p.Older = append(p.Older, v.Line(k))
		}
		return
	}
	v.keepCut(first, p.Turns, p.Lines, used)
}

// TurnOf reads one line as a turn of the conversation (proto.Message: the
// one text rule, the one normalisation of tool-call arguments).
func TurnOf(line []byte) (modelapi.Turn, bool) {
	m, err := proto.ParseMessage(line)
	if err != nil {
		return modelapi.Turn{}, false
	}
	t := modelapi.Turn{Role: m.Role}
	parts := m.Parts() // once: a long session's prompt reads every line
	switch m.Role {
	case "user", "assistant":
		t.Text = proto.PartsText(parts)
		if m.Role == "assistant" {
			t.ToolCalls = providerCalls(proto.PartsToolCalls(parts))
		}
	case "tool":
		if len(parts) == 0 {
			return t, false
		}
		p := parts[0]
		t.ToolCallID, t.ToolName, t.IsError, t.Text = p.ToolCallID, m.Name, p.IsError, proto.ContentText(p.Content)
	default:
		return t, false
	}
	return t, t.Text != "" || len(t.ToolCalls) > 0 || t.ToolCallID != ""
}

// ToolCalls are the tool calls of an assistant message, as the provider
// takes them.
func ToolCalls(m proto.Message) []modelapi.ToolCall { return providerCalls(m.ToolCalls()) }

func providerCalls(calls0 []proto.ToolCall) []modelapi.ToolCall {
	var calls []modelapi.ToolCall
	for _, c := range calls0 {
		calls = append(calls, modelapi.ToolCall{ID: c.ID, Name: c.Name, Arguments: string(c.Arguments)})
	}
	return calls
}
