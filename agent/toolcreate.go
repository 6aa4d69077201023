package agent

import (
	"context"
	"encoding/json"
	"maps"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/agent/modelapi"
	"github.com/ctxfs/ctxfs/agent/provider"
	"github.com/ctxfs/ctxfs/agent/trampoline"
	"github.com/ctxfs/ctxfs/proto"
)

// The lives of a child (SPEC 18): owned, a session of the parent's home
// or space; temp, a temp session. Either ends when its parent is
// cancelled or lost.
const (
	LifeOwned = "owned"
	LifeTemp  = "temp"
)

// FrameAgentCreated answers agent.create:
// {"type":"agent.created","child":R2,"agent":A,"session":S2}.
const FrameAgentCreated = "agent.created"

var agentCreateSpec = modelapi.Tool{
	Name:        def.ToolAgentCreate,
	Description: "Start a child run of another agent of this home with input; it runs on its own. Returns its run id and session; its status and result appear under context/child/<run>/ of this session.",
	Parameters:  json.RawMessage(`{"type":"object","properties":{"agent":{"type":"string","minLength":1},"input":{"type":"string","minLength":1},"session":{"type":"string"},"life":{"type":"string","enum":["owned","temp"]}},"required":["agent","input"],"additionalProperties":false}`),
}

// CreateRequest is an agent.create: the call's id, the agent to start,
// its input, its session ("" for a new name) and its life.
type CreateRequest struct {
	ID      string `json:"id"`
	Agent   string `json:"agent"`
	Input   string `json:"input"`
	Session string `json:"session"`
	Life    string `json:"life"`
}

// ParseCreate reads an agent.create request (the tool's arguments or the
// socket's line): EINVAL for a bad shape; names are judged by the engine.
func ParseCreate(line []byte) (CreateRequest, error) {
	var r CreateRequest
	if err := json.Unmarshal(line, &r); err != nil {
		return r, abi.Errorf(syscall.EINVAL, def.ToolAgentCreate, "%v", err)
	}
	if r.Life == "" {
		r.Life = LifeOwned
	}
	switch {
	case r.Agent == "" || r.Input == "":
		return r, abi.Errorf(syscall.EINVAL, def.ToolAgentCreate, "agent.create takes {\"agent\", \"input\", \"session\"?, \"life\"?}")
	case r.Life != LifeOwned && r.Life != LifeTemp:
		return r, abi.Errorf(syscall.EINVAL, def.ToolAgentCreate, "life %q is neither owned nor temp", r.Life)
	}
	return r, nil
}

// create makes an agent.create call of a model run: its result is the
// agent.created frame's JSON, or the refusal.
func (l *toolLoop) create(ctx context.Context, c ToolCall) (content string, isErr, ok bool) {
	req, err := ParseCreate(provider.ArgsObject(c.Arguments))
	if err != nil {
		return callFailed(err)
	}
	req.ID = c.ID
	f, err := l.s.Host.Create(ctx, c, req)
	if err != nil {
		return callFailed(err)
	}
	return string(f.Line()[:len(f.Line())-1]), false, true
}

// createOp is the op agent.create on a run's control socket: a program
// starts a child as a model does with the tool (the engine decides
// whether this run may).
func (c *control) createOp(ctx context.Context, line []byte) *proto.Object {
	req, err := ParseCreate(line)
	if err == nil && !proto.ValidCallID(req.ID) {
		err = abi.Errorf(syscall.EINVAL, def.ToolAgentCreate, "the id is not a call id (1 to %d printable bytes)", proto.MaxCallIDBytes)
	}
	if err == nil && c.host == nil {
		err = abi.Errorf(syscall.ENOTSUP, def.ToolAgentCreate, "the run has no host to ask")
	}
	if err != nil {
		return proto.ErrorFrame(err)
	}
	f, err := c.host.Create(ctx, ToolCall{ID: req.ID, Name: def.ToolAgentCreate, Arguments: string(line)}, req)
	if err != nil {
		return proto.ErrorFrame(err)
	}
	return f
}

// giveControl opens the run's control socket and names it in the run's
// environment (CTX_CONTROL_SOCKET) as the program sees it: its host path,
// or its place in the jail. The caller closes it after the run.
func (s *Spec) giveControl(ctx context.Context) (*control, error) {
	c, err := openControl(ctx, *s)
	if err != nil {
		return nil, err
	}
	socket := c.path
	if s.Def.Isolation == def.IsolationChroot {
		socket = trampoline.JailControl(s.Jail.MountRoot)
	}
	env := maps.Clone(s.Env)
	env[trampoline.ControlSocketEnv] = socket
	s.Env, s.control = env, c
	return c, nil
}
