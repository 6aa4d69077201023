package agent

import (
	"context"
	"encoding/json"
	"errors"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/tools"
	"github.com/ctxfs/ctxfs/proto"
)

// permit takes the CLI's tool use through the run's approval flow (SPEC
// 17), as a built-in tool's call: recorded, waiting for a person, answered
// with a decision. A tool answered allow_run before is allowed again
// without asking.
func (c *control) permit(ctx context.Context, line []byte) *proto.Object {
	var req proto.PermitRequest
	if err := json.Unmarshal(line, &req); err != nil {
		return proto.ErrorFrame(abi.Errorf(syscall.EINVAL, "permit", "%v", err))
	}
	if err := checkPermit(&req); err != nil {
		return proto.ErrorFrame(err)
	}
	// An edit's file is kept first (SPEC 17: a CLI's edit, where the host
	// learns its path): once allowed, the CLI changes it at once. An edit
	// whose file cannot be kept is denied, and no one is asked.
	if p := editedPath(req.Name, req.Arguments); p != "" && c.host != nil {
		if err := c.keepEdit(ctx, req.ID, p); err != nil {
			return proto.NewObject("type", proto.FramePermit, "id", req.ID, "decision", proto.DecisionDeny,
				"reason", "the file's earlier content could not be kept: "+err.Error())
		}
	}
	if c.allowedForRun(req.Name) {
		return proto.NewObject("type", proto.FramePermit, "id", req.ID, "decision", proto.DecisionAllowRun)
	}
	if c.host == nil {
		return proto.ErrorFrame(abi.Errorf(syscall.ENOTSUP, "permit", "the run has no host to ask"))
	}
	decision, reason := c.host.Approve(ctx, ToolCall{ID: req.ID, Name: req.Name, Arguments: string(req.Arguments)})
	if decision == proto.DecisionAllowRun {
		c.mu.Lock()
		c.allowRun[req.Name] = true
		c.mu.Unlock()
	}
	f := proto.NewObject("type", proto.FramePermit, "id", req.ID, "decision", decision)
	if reason != "" {
		f.Set("reason", reason)
	}
	return f
}

func (c *control) allowedForRun(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.allowRun[name]
}

// checkPermit refuses, EINVAL, a request the approval flow cannot record as it
// came: a call id of another shape, a name that is empty, long or not
// printable ASCII, arguments that are not one JSON object.
func checkPermit(r *proto.PermitRequest) error {
	switch {
	case !proto.ValidCallID(r.ID):
		return abi.Errorf(syscall.EINVAL, "permit", "the id is not a call id (1 to %d printable bytes)", proto.MaxCallIDBytes)
	case !proto.ValidCallID(r.Name): // a tool's name has the shape of an id
		return abi.Errorf(syscall.EINVAL, "permit", "the name is not 1 to %d printable bytes", proto.MaxCallIDBytes)
	case len(r.Arguments) == 0 || r.Arguments[0] != '{':
		return abi.Errorf(syscall.EINVAL, "permit", "the arguments are not a JSON object")
	}
	return nil
}

// editedPath is the file a CLI's tool use changes, as its input names it:
// Claude Code's Write, Edit and MultiEdit (file_path) and NotebookEdit
// (notebook_path); "" for any other tool.
func editedPath(name string, args json.RawMessage) string {
	var in struct {
		FilePath     string `json:"file_path"`
		NotebookPath string `json:"notebook_path"`
	}
	switch name {
	case "Write", "Edit", "MultiEdit":
		if json.Unmarshal(args, &in) == nil {
			return in.FilePath
		}
	case "NotebookEdit":
		if json.Unmarshal(args, &in) == nil {
			return in.NotebookPath
		}
	}
	return ""
}

// keepEdit keeps the file a CLI's tool use will edit, as the run's uid in
// its isolation (a tool process's fs.keep: the path resolved as the CLI
// resolves it), under the tool use's id.
func (c *control) keepEdit(ctx context.Context, id, path string) error {
	args, _ := json.Marshal(map[string]string{"path": path}) // a map of strings always marshals
	call := ToolCall{ID: id, Name: tools.FSKeep, Arguments: string(args)}
	content, isErr := ExecTool(ctx, c.spec, call, func(b FileBefore) error { return c.host.Keep(call, b) })
	if isErr {
		var f tools.Failure
		if json.Unmarshal([]byte(content), &f) == nil && f.Code != "" {
			return f.Err()
		}
		return errors.New(content)
	}
	return nil
}
