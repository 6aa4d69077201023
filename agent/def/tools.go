package def

import (
	"strconv"
	"strings"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/tools"
)

// The values of agent/NAME.d/approval (SPEC 17).
const (
	ApprovalAuto = "auto"
	ApprovalAsk  = "ask"
)

// Defaults of a definition's tool settings (SPEC 17).
const (
	DefaultPerm            = "r"
	DefaultSteps           = 32
	DefaultApprovalTimeout = 3600 * time.Second
)

// maxSteps bounds agent/NAME.d/steps: far beyond any useful run, and each
// step is a provider turn.
const maxSteps = 100000

// readToolSettings reads an agent's tools, perm, steps, approval and
// approval_timeout (SPEC 17). Every agent has the defaults; a model
// definition has no tools and its files are not consulted. An agent not
// answered by a model API keeps what it declares, which only a model run
// offers: its tools are never run, but approval applies to a CLI agent's
// permission prompts too, so every agent's files are read and checked
// alike.
func (d *Definition) readToolSettings() error {
	d.Perm, d.Steps, d.Approval, d.ApprovalTimeout = DefaultPerm, DefaultSteps, ApprovalAuto, DefaultApprovalTimeout
	if d.Kind != abi.KindAgent {
		return nil
	}
	for _, step := range []func() error{d.readPerm, d.readTools, d.readSteps, d.readApproval, d.readApprovalTimeout, d.readChildren} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// readPerm: letters of "rwx", each at most once.
func (d *Definition) readPerm() error {
	v, ok, err := d.oneLine("perm")
	if !ok || err != nil {
		return err
	}
	for i, c := range v {
		if !strings.ContainsRune("rwx", c) || strings.ContainsRune(v[:i], c) {
			return d.invalid("perm", "%q is not letters of rwx, each once", v)
		}
	}
	d.Perm = v
	return nil
}

// readTools reads tool names, one a line; Tools keeps those perm allows,
// in file order. An empty file declares none; an unknown, repeated or
// padded name (a blank line, spaces, a CR) is EINVAL: a typo must not
// silently take a tool away or give one.
func (d *Definition) readTools() error {
	data, ok, err := d.read("tools")
	if !ok || err != nil || len(data) == 0 {
		return err
	}
	seen := map[string]bool{}
	for n, name := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		switch {
		case !knownTool(name):
			return d.invalid("tools", "line %d: %q is not one of fs.read, fs.list, fs.stat, fs.write, fs.replace, shell.exec, ask_user, agent.create", n+1, name)
		case seen[name]:
			return d.invalid("tools", "line %d: %s is listed twice", n+1, name)
		}
		seen[name] = true
		if toolAllowed(name, d.Perm) {
			d.Tools = append(d.Tools, name)
		}
	}
	return nil
}

func (d *Definition) readSteps() error {
	v, ok, err := d.oneLine("steps")
	if !ok || err != nil {
		return err
	}
	n, perr := strconv.Atoi(v)
	if perr != nil || n < 1 || n > maxSteps || strconv.Itoa(n) != v {
		return d.invalid("steps", "%q is not a number of calls from 1 to %d", v, maxSteps)
	}
	d.Steps = n
	return nil
}

func (d *Definition) readApproval() error {
	return d.readEither("approval", &d.Approval, ApprovalAuto, ApprovalAsk)
}

// readApprovalTimeout accepts whole seconds, at least one: a call that
// could wait for no time at all would be denied before anyone saw it.
func (d *Definition) readApprovalTimeout() error {
	v, ok, err := d.oneLine("approval_timeout")
	if !ok || err != nil {
		return err
	}
	n, perr := strconv.ParseUint(v, 10, 64)
	if perr != nil || n == 0 || time.Duration(n) > maxTimeout/time.Second {
		return d.invalid("approval_timeout", "%q is not a number of seconds from 1 to %d", v, int64(maxTimeout/time.Second))
	}
	d.ApprovalTimeout = time.Duration(n) * time.Second
	return nil
}

// ChildrenAllow is the value of agent/NAME.d/children that lets a child
// run of the agent start children of its own (SPEC 18); absent, a child
// cannot.
const ChildrenAllow = "allow"

func (d *Definition) readChildren() error {
	v, ok, err := d.oneLine("children")
	if !ok || err != nil {
		return err
	}
	if v != ChildrenAllow {
		return d.invalid("children", "%q is not allow", v)
	}
	d.Children = true
	return nil
}

// ToolAgentCreate is the built-in tool, and the op of a run's control
// socket, that starts a child run (SPEC 18). Its class is x: starting
// another agent executes something, as shell.exec does; with approval ask
// it waits for a person like any call of class x.
const ToolAgentCreate = "agent.create"

// knownTool reports whether a definition may declare name.
func knownTool(name string) bool { return tools.Known(name) || name == ToolAgentCreate }

// ToolClass is the perm letter a tool needs (tools.Class; x for
// agent.create).
func ToolClass(name string) byte {
	if name == ToolAgentCreate {
		return tools.ClassExec
	}
	return tools.Class(name)
}

// toolAllowed reports whether perm allows the tool name.
func toolAllowed(name, perm string) bool { return tools.AllowedClass(ToolClass(name), perm) }
