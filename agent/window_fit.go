package agent

import (
	"context"
	"slices"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/agent/modelapi"
	"github.com/ctxfs/ctxfs/agent/prompt"
	"github.com/ctxfs/ctxfs/agent/window"
	"github.com/ctxfs/ctxfs/proto"
)

// SummaryHeading starts the turn that carries the summary in a prompt.
const SummaryHeading = "[summary of earlier conversation]"

// runWindow is a model run's context window (SPEC 18): its limits, the
// summary in force, and the lines of messages.jsonl after the summary's
// cursor: first the older lines not read (Prompt.Older), then one for
// each of the first turns of the run's request (later turns are the
// run's own tool steps, whose lines the run has not seen written).
type runWindow struct {
	lim     window.Limits
	summary string
	cut     bool // a summary turn goes first: something was compacted
	lines   []prompt.Line
	older   int // lines[:older] are Prompt.Older
	keep    func([]byte) error
	// counted is the request's turns as last counted: the tokens of the
	// first n turns of the array at first (see turnTokens).
	counted struct {
		first     *modelapi.Turn
		n, tokens int
	}
}

func newRunWindow(s Spec) *runWindow {
	w := &runWindow{lim: s.Def.Limits()}
	if p := s.Prompt; p != nil {
		w.summary, w.cut, w.keep = p.Summary, p.Cursor.End > 0, p.Keep
		w.lines, w.older = p.Lines, len(p.Older) // only read and resliced: shared
		if len(p.Older) > 0 {
			w.lines = append(slices.Clip(p.Older), p.Lines...)
		}
		if len(p.Turns) > 0 {
			w.counted.first, w.counted.n, w.counted.tokens = &p.Turns[0], len(p.Turns), p.TurnTokens
		}
	}
	return w
}

// turnTokens is window.TurnTokens of turns, summed. The turns a count
// was made of are counted again only when turns no longer starts with
// them in the same array: a run only appends turns to its request, and
// the turns of a prompt are never changed in place (a compaction makes a
// new array), so a long prompt's turns are counted once, by prompt.Memos.New.
func (w *runWindow) turnTokens(turns []modelapi.Turn) int {
	c := &w.counted
	if len(turns) == 0 {
		return 0
	}
	if &turns[0] != c.first || len(turns) < c.n {
		c.first, c.n, c.tokens = &turns[0], 0, 0
	}
	for _, t := range turns[c.n:] {
		c.tokens += window.TurnTokens(t)
	}
	c.n = len(turns)
	return c.tokens
}

// headTokens is what req's prompt holds besides its turns: the system
// prompt and the tools offered.
func headTokens(req modelapi.Request) int {
	return window.RequestTokens(modelapi.Request{System: req.System, Tools: req.Tools})
}

// requestTokens is window.RequestTokens of the request as sent (sent).
func (l *toolLoop) requestTokens() int {
	n := headTokens(l.req) + l.win.turnTokens(l.req.Turns)
	if l.win.cut {
		n += window.TurnTokens(l.win.summaryTurn())
	}
	return n
}

// olderTurns reads the older lines, for a strategy that summarizes them.
func (w *runWindow) olderTurns() []modelapi.Turn {
	var turns []modelapi.Turn
	for _, l := range w.lines[:w.older] {
		if t, ok := prompt.TurnOf(l.Text); ok {
			turns = append(turns, t)
		}
	}
	return turns
}

// olderTokens is an upper bound of the older lines' tokens: a line's JSON
// holds its turn's text and more.
func (w *runWindow) olderTokens() int {
	n := 0
	for _, l := range w.lines[:w.older] {
		n += window.Tokens(string(l.Text))
	}
	return n
}

// summaryTurn is the turn that carries the summary.
func (w *runWindow) summaryTurn() modelapi.Turn {
	text := w.summary
	if text == "" {
		text = "(earlier turns were left out)"
	}
	return modelapi.Turn{Role: modelapi.RoleUser, Text: SummaryHeading + "\n" + text}
}

// sent is the request as sent: the summary turn, then the turns.
func (l *toolLoop) sent() modelapi.Request {
	req := l.req
	if l.win != nil && l.win.cut {
		req.Turns = append([]modelapi.Turn{l.win.summaryTurn()}, l.req.Turns...)
	}
	return req
}

// fit makes the next request fit the window: a prompt beyond the
// compaction point is compacted (compactNow); false when the run must
// end, its error emitted (E2BIG: even the newest turns do not fit).
func (l *toolLoop) fit(ctx context.Context, cfg modelapi.Config) bool {
	if l.fits() {
		return true
	}
	w := l.win
	start, ok := window.Cut(l.req.Turns, w.fixed(l.req), w.lim.CompactAt/2, w.lim.Prompt())
	if !ok {
		l.emit(proto.ErrorFrame(abi.Errorf(syscall.E2BIG, "run", "the newest turns do not fit the window (%d tokens less %d for the reply)", w.lim.Window, w.lim.Reserve)))
		return false
	}
	if _, err := l.compactNow(ctx, cfg, start); err != nil {
		if ctx.Err() == nil {
			l.emit(proto.ErrorFrame(err))
		}
		return false
	}
	return true
}

// fits reports whether the next request fits the window as it is.
func (l *toolLoop) fits() bool {
	return l.win == nil || l.win.older == 0 && l.requestTokens() <= l.win.lim.CompactAt
}

// Compacted is what a compaction did: the cursor it wrote, the summary's
// size, and how many turns were kept after it.
type Compacted struct {
	Cursor       window.Cursor
	SummaryBytes int
	KeptTurns    int
	Strategy     string
	Failed       error // the strategy's failure: the old summary was kept
}

// fixed is what a prompt holds besides its turns: the system prompt, the
// tools, and the summary's turn at its largest.
func (w *runWindow) fixed(req modelapi.Request) int {
	return headTokens(req) +
		window.TurnTokens(modelapi.Turn{Text: SummaryHeading}) + w.lim.SummaryTokens()
}

// compactNow replaces the turns before start (a cut: window.Cut, or the
// newest user turn for Compact) by the strategy's summary. A strategy that
// fails keeps the old summary (the turns are left out all the same:
// truncation) and says so in a log frame. The summary is written to
// context/summary.md when the cut falls in messages.jsonl's turns. The
// prompt left must fit the window less the reply's reserve (E2BIG).
func (l *toolLoop) compactNow(ctx context.Context, cfg modelapi.Config, start int) (Compacted, error) {
	w := l.win
	done := Compacted{Strategy: l.s.Def.WindowDef.Strategy}
	if start > 0 || w.older > 0 {
		cut := l.req.Turns[:start]
		if done.Strategy != def.CompactTruncate {
			cut = append(w.olderTurns(), cut...)
		}
		text, err := summarize(ctx, l.s, cfg, w.lim, w.summary, cut, l.emit)
		if err != nil {
			if ctx.Err() != nil {
				return done, err
			}
			done.Failed, text = err, w.summary
			l.emit(proto.NewObject("type", proto.FrameLog, "stream", "compact", "text", "compaction by "+done.Strategy+" failed, the old summary is kept: "+err.Error()))
		}
		w.summary, w.cut = text, true
		l.req.Turns = append([]modelapi.Turn(nil), l.req.Turns[start:]...)
		done.Cursor = w.advance(w.older+start, l.emit)
		w.older = 0
	}
	done.SummaryBytes, done.KeptTurns = len(w.summary), len(l.req.Turns)
	if n := l.requestTokens(); n > w.lim.Prompt() {
		return done, abi.Errorf(syscall.E2BIG, "run", "the prompt takes about %d tokens, more than the window (%d) less the reply's %d", n, w.lim.Window, w.lim.Reserve)
	}
	return done, nil
}

// advance moves past the first n turns and keeps the summary with the
// cursor of the last of them when it is a line of messages.jsonl; a cut
// into the run's own steps is kept by the run alone.
func (w *runWindow) advance(n int, emit func(*proto.Object)) window.Cursor {
	if n > len(w.lines) {
		w.lines = nil
		return window.Cursor{}
	}
	c := w.lines[n-1].Cursor()
	w.lines = w.lines[n:]
	if w.keep != nil {
		if err := w.keep(window.FormatSummary(c, w.summary)); err != nil {
			emit(proto.NewObject("type", proto.FrameLog, "stream", "compact", "text", "context/summary.md could not be written: "+err.Error()))
		}
	}
	return c
}

// WindowUse is how full a session's window is now (SPEC 18, ctx agent
// status): the estimate of the prompt a run would send (the tools its
// definition offers included), and the definition's limits.
func WindowUse(defn *def.Definition, p *prompt.Prompt) (tokens int, lim window.Limits) {
	l := &toolLoop{req: p.Request, win: newRunWindow(Spec{Def: defn, Prompt: p})}
	l.req.Tools = toolSpecs(defn.Tools)
	return l.requestTokens() + l.win.olderTokens(), l.win.lim
}

// WindowStatus is the status op's "window" object of s (its Def and
// Prompt): tokens now, limit (the window less the reply's reserve),
// window and compact_at.
func WindowStatus(s Spec) *proto.Object {
	tokens, lim := WindowUse(s.Def, s.Prompt)
	return proto.NewObject("tokens", tokens, "limit", lim.Prompt(), "window", lim.Window, "compact_at", lim.CompactAt)
}

// CompactFrame is the op compact's answer (Compact): a compacted frame,
// with "error" when the strategy failed (the old summary kept); EINVAL
// for a definition no model API answers (a program keeps its own window).
func CompactFrame(ctx context.Context, s Spec) (*proto.Object, error) {
	if !s.Def.AnsweredByAPI() {
		return nil, abi.Errorf(syscall.EINVAL, "compact", "%s %s is not answered by a model API: its program keeps its own window", s.Def.Kind, s.Def.Name)
	}
	done, err := Compact(ctx, s, func(*proto.Object) {})
	if err != nil {
		return nil, err
	}
	f := proto.NewObject("type", proto.FrameCompacted, "cursor", done.Cursor.End, "summary_bytes", done.SummaryBytes, "kept_turns", done.KeptTurns, "strategy", done.Strategy)
	if done.Failed != nil {
		f.Set("error", done.Failed.Error())
	}
	return f, nil
}

// Compact runs the definition's strategy now (SPEC 18, op compact): every
// turn before the newest user turn is folded into the summary, which is
// kept as a run's would be (s.Prompt.Keep). Frames a run would emit (a
// summarize request's usage, a failed strategy's log) go to emit.
func Compact(ctx context.Context, s Spec, emit func(*proto.Object)) (Compacted, error) {
	cfg := s.Def.API.Config
	if s.Def.WindowDef.Strategy == def.CompactSummarize { // the one strategy that needs the key
		var err error
		if cfg, err = apiConfig(s); err != nil {
			return Compacted{}, err
		}
	}
	l := newToolLoop(s, emit, 0, nil)
	l.req, l.win = s.Prompt.Request, newRunWindow(s)
	l.req.Tools = toolSpecs(s.Def.Tools)
	start := 0
	for i, t := range l.req.Turns {
		if t.Role == modelapi.RoleUser {
			start = i
		}
	}
	done, err := l.compactNow(ctx, cfg, start)
	if done.Cursor.End == 0 {
		done.Cursor = s.Prompt.Cursor
	}
	return done, err
}
