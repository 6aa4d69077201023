package children

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/reply"
)

// Create starts a child of p (agent.create, SPEC 18) and returns the
// agent.created frame once the child's start is recorded; the child's
// progress goes on in the background (watch). Refused, nothing started:
// EACCES for a child run whose definition does not allow children, EINVAL
// for a bad name or input, and what the send refuses (EACCES for an
// isolation the parent's would loosen, ENOENT for no such agent).
func (b *Book) Create(p Parent, req agent.CreateRequest) (*proto.Object, error) {
	if p.IsChild && !p.Def.Children {
		return nil, abi.Errorf(syscall.EACCES, def.ToolAgentCreate, "a child run cannot start children: its definition does not allow it (children allow)")
	}
	if !abi.ValidName(req.Agent) {
		return nil, abi.Errorf(syscall.EINVAL, def.ToolAgentCreate, "%q is not an agent name", truncate(req.Agent))
	}
	if strings.IndexByte(req.Input, 0) >= 0 {
		return nil, abi.Errorf(syscall.EINVAL, def.ToolAgentCreate, "the input contains NUL")
	}
	session, clientID := req.Session, "child-"+randomHex()
	if session == "" {
		session = clientID
	}
	if !abi.ValidSessionName(session) {
		return nil, abi.Errorf(syscall.EINVAL, def.ToolAgentCreate, "%q is not a session name", truncate(session))
	}
	f := b.family(p)
	r, err := p.Start(req.Agent, childRequest(p, req, clientID, session))
	if err != nil {
		return nil, err
	}
	start, err := r.Next(context.Background())
	if err != nil || start.Str("type") != proto.FrameStart {
		r.Close()
		return nil, abi.Errorf(syscall.EIO, def.ToolAgentCreate, "the child sent no start")
	}
	c := b.add(f, start.Str("run"), req.Agent, session, req.Life)
	go b.watch(c, r)
	return proto.NewObject("type", agent.FrameAgentCreated, "child", c.Run, "agent", c.Agent, "session", session), nil
}

// childRequest is the send that starts the child: owned, a session of the
// parent's home or space; temp, a temp session of the parent's uid.
func childRequest(p Parent, req agent.CreateRequest, clientID, session string) *proto.Request {
	r := &proto.Request{Op: proto.OpSend, ID: clientID, Session: session, Input: req.Input, Parent: p.Run, Scope: abi.ScopePrivate}
	if p.Files != nil {
		r.ParentSession = p.Files.Session
	}
	switch {
	case req.Life == agent.LifeTemp:
		r.Scope = abi.ScopeTemp
	case p.Scope == abi.ScopeShared:
		r.Scope, r.Space = abi.ScopeShared, p.Space
	}
	return r
}

// watch follows a child's frames to its end: its status and result.md,
// its waiting calls and its usage told to the parent.
func (b *Book) watch(c *Child, r *reply.Reply) {
	defer r.Close()
	status := StatusError // a stream that ends without done: the run could not record its end
	for {
		fr, err := r.Next(context.Background())
		if err != nil {
			break
		}
		switch fr.Str("type") {
		case proto.FrameMessage:
			if m := proto.MessageOf(fr); m.Role == "assistant" {
				c.mu.Lock()
				c.result = m.Text()
				c.mu.Unlock()
			}
		case proto.FrameUsage:
			c.addUsage(fr)
		case proto.FrameApprovalRequest, proto.FrameQuestion:
			c.f.p.Record(waitingFrame(c, fr))
		case proto.FrameDone:
			status = doneStatus(fr.Str("status"))
		}
	}
	c.mu.Lock()
	c.f.p.Files.write(c.Run, fileResult, c.result)
	usage := c.usage
	c.mu.Unlock()
	c.set(status)
	// Let go once its files are written, not before: until then the
	// parent's session is not archived (Writing).
	b.mu.Lock()
	delete(b.kids, c.Run)
	delete(b.early, c.Run)
	delete(c.f.kids, c.Run) // let go: a parent that runs on would hold every result it was told
	b.mu.Unlock()
	for _, u := range usage {
		f := proto.NewObject("type", proto.FrameUsage, "child", c.Run, "agent", c.Agent, "model", u.model)
		if u.modelID != "" {
			f.Set("model_id", u.modelID)
		}
		f.Set("input_tokens", u.in)
		f.Set("output_tokens", u.out)
		c.f.p.Record(f)
	}
}

// childUsage is the sum of a child's usage frames of one model (and
// provider model id), told to the parent at the child's end so that
// ctx agent usage counts them under their model.
type childUsage struct {
	model, modelID string
	in, out        int64
}

// addUsage adds a usage frame of the child to its sums.
func (c *Child) addUsage(fr *proto.Object) {
	c.mu.Lock()
	defer c.mu.Unlock()
	model, modelID := truncate(fr.Str("model")), truncate(fr.Str("model_id"))
	for _, u := range c.usage {
		if u.model == model && u.modelID == modelID {
			u.in = proto.AddTokens(u.in, count(fr, "input_tokens"))
			u.out = proto.AddTokens(u.out, count(fr, "output_tokens"))
			return
		}
	}
	if len(c.usage) < maxUsageModels { // a program names its models: a bounded few are kept
		c.usage = append(c.usage, &childUsage{model, modelID, count(fr, "input_tokens"), count(fr, "output_tokens")})
	}
}

// waitingFrame names a child's waiting call for the parent's clients,
// answered on the child's agent socket with the child's run id.
func waitingFrame(c *Child, fr *proto.Object) *proto.Object {
	kind := "approval"
	if fr.Str("type") == proto.FrameQuestion {
		kind = "question"
	}
	out := proto.NewObject("type", FrameWaiting, "child", c.Run, "agent", c.Agent, "session", c.Session, "kind", kind, "id", fr.Str("id"))
	for _, k := range []string{"name", "arguments", "text"} {
		if v := fr.Raw(k); v != nil {
			out.Set(k, v)
		}
	}
	return out
}

// doneStatus is the status file's word for a done frame's status.
func doneStatus(s string) string {
	switch s {
	case "ok":
		return StatusDone
	case abi.StateCancelled:
		return StatusCancelled
	}
	return StatusError
}

// set writes the child's status, in the order its changes came; a child
// that ended keeps its end (a late "active" does not undo it).
func (c *Child) set(status string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.status != StatusPending && c.status != StatusActive {
		return
	}
	c.status = status
	c.f.p.Files.write(c.Run, fileStatus, status+"\n")
}

// count is a usage frame's number of tokens (0 when absent or bad),
// clamped to [0, proto.MaxTokens].
func count(fr *proto.Object, key string) int64 {
	var n int64
	json.Unmarshal(fr.Raw(key), &n)
	return proto.ClampTokens(n)
}

func randomHex() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
