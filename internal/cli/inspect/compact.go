package inspect

import (
	"fmt"
	"io"

	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/proto"
)

// CompactHelp is ctx agent compact's help.
const CompactHelp = `Runs the session's compaction strategy now (SPEC 18: the agent's
compact.strategy, truncate by default): every turn before the newest user
turn is folded into the summary, context/summary.md, which names the last
message it covers; messages.jsonl is not changed and no run is recorded.
Prints the cursor (the id of that message: where its line ends in
messages.jsonl), the summary's size and how many turns the next prompt
keeps after it. A strategy that fails keeps the old summary (printed as
error:). Only an agent answered by a model API has a window the server
keeps (EINVAL otherwise); EBUSY while a run of the session is active.
`

// Compact asks the server to compact a session's window now.
func Compact(e *clienv.Env, p *clienv.Parsed) int {
	return sessionOp(e, p, "compact", proto.OpCompact, proto.FrameCompacted, printCompacted)
}

func printCompacted(w io.Writer, o *proto.Object) {
	fmt.Fprintf(w, "strategy: %s\n", o.Str("strategy"))
	fmt.Fprintf(w, "cursor: %s\n", o.Raw("cursor"))
	fmt.Fprintf(w, "summary_bytes: %s\n", o.Raw("summary_bytes"))
	fmt.Fprintf(w, "kept_turns: %s\n", o.Raw("kept_turns"))
	if msg := o.Str("error"); msg != "" {
		fmt.Fprintf(w, "error: %s\n", msg)
	}
}
