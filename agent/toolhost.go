package agent

import (
	"context"

	"github.com/ctxfs/ctxfs/agent/modelapi"
	"github.com/ctxfs/ctxfs/proto"
)

// ToolCall is one call a model made: its id, its name as ctxfs spells it
// ("fs.read") and its arguments as JSON text.
type ToolCall = modelapi.ToolCall

// FileBefore is what a file was before a tool changed it: the path as the
// tool resolved it (inside the jail for a chroot run), and its content, or
// its absence.
type FileBefore struct {
	Path    string
	Existed bool
	Content []byte // when Existed
}

// ToolHost is what a model run with tools asks of the engine: the engine
// records and waits, the agent package runs the tools.
type ToolHost interface {
	// Approve blocks until call may run (proto.DecisionAllowOnce or
	// proto.DecisionAllowRun), is denied (proto.DecisionDeny, with its
	// reason: an answer, or "timeout"), or the run must stop
	// (proto.DecisionStop); it returns proto.DecisionStop when ctx ends.
	Approve(ctx context.Context, call ToolCall) (decision, reason string)
	// Ask blocks until a person answers an ask_user question. ETIMEDOUT
	// when no one answered in time (the model is told); any other error
	// ends the run (the engine reported why).
	Ask(ctx context.Context, call ToolCall, text string) (string, error)
	// Keep records a file's content before a tool changes it; an error
	// (the session's versions are full: EDQUOT) refuses the change.
	Keep(call ToolCall, before FileBefore) error
	// Create starts a child run (agent.create, SPEC 18) and returns its
	// agent.created frame once it is queued; an error refuses it and
	// nothing was started.
	Create(ctx context.Context, call ToolCall, req CreateRequest) (*proto.Object, error)
}

// Resume is where a run stood when it is resumed after a restart (SPEC
// 17): the calls of its last assistant message still without a result, in
// order; which calls were announced already (tool_call recorded); the ids
// of all its calls, which a later call does not take again; how many calls
// it made; the tools allowed for the rest of the run.
type Resume struct {
	Pending   []ToolCall
	Announced map[string]bool
	Used      map[string]bool
	Steps     int
	AllowRun  map[string]bool
}
