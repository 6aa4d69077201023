package def

import (
	"path/filepath"
	"strconv"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/window"
)

// Compaction strategies a definition may name (SPEC 18); any other
// name is an executable in NAME.d/compact.d/.
const (
	CompactTruncate  = "truncate"
	CompactSummarize = "summarize"
)

// maxWindow bounds window and compact: beyond any model's context (10M
// tokens), and small enough that no sum of token counts overflows.
const maxWindow = 10_000_000

// minWindow is the smallest window a definition may set: room for a
// system prompt, a summary and one exchange.
const minWindow = 256

// WindowDef is a definition's context window settings (SPEC 18).
type WindowDef struct {
	Window   int    // agent/NAME.d/window; 0: auto
	Compact  int    // agent/NAME.d/compact; 0: auto
	Strategy string // compact.strategy: CompactTruncate (default), CompactSummarize, or a compact.d/ name
	Program  string // the host path of a compact.d/ strategy's executable, "" otherwise
}

// readWindow reads window, compact and compact.strategy.
func (d *Definition) readWindow() error {
	d.WindowDef.Strategy = CompactTruncate
	for _, f := range []struct {
		file string
		to   *int
	}{{"window", &d.WindowDef.Window}, {"compact", &d.WindowDef.Compact}} {
		if err := d.readTokens(f.file, f.to); err != nil {
			return err
		}
	}
	return d.readStrategy()
}

// readTokens reads "auto" (0) or a token count from minWindow to maxWindow.
func (d *Definition) readTokens(file string, to *int) error {
	v, ok, err := d.oneLine(file)
	if !ok || err != nil || v == "auto" {
		return err
	}
	n, perr := strconv.Atoi(v)
	if perr != nil || n < minWindow || n > maxWindow || strconv.Itoa(n) != v {
		return d.invalid(file, "%q is neither auto nor a token count from %d to %d", v, minWindow, maxWindow)
	}
	*to = n
	return nil
}

// readStrategy reads compact.strategy: truncate, summarize, or the name of
// an executable in compact.d/ that only root and the server can change
// (it runs with the session's uid, as the agent's program does).
func (d *Definition) readStrategy() error {
	v, ok, err := d.oneLine("compact.strategy")
	if !ok || err != nil || v == CompactTruncate {
		return err
	}
	if v == CompactSummarize {
		d.WindowDef.Strategy = v
		return nil
	}
	if !abi.ValidName(v) {
		return d.invalid("compact.strategy", "%q is not truncate, summarize or a name in compact.d/", v)
	}
	prog, err := findProgram(filepath.Join(d.Dir, "compact.d", v), d.Dir, d.w)
	if err != nil {
		return err
	}
	if prog == "" {
		return d.invalid("compact.strategy", "compact.d/%s is not there", v)
	}
	d.WindowDef.Strategy, d.WindowDef.Program = v, prog
	return nil
}

// Limits are the run's window figures: the window (auto from the model's
// id), the reply's reserve (max_tokens) and the compaction point.
func (d *Definition) Limits() window.Limits {
	id, maxTokens := d.Model, 0
	if d.API != nil {
		id, maxTokens = d.API.Config.ModelID, d.API.Config.MaxTokens
	}
	return window.LimitsOf(id, d.WindowDef.Window, d.WindowDef.Compact, maxTokens)
}
