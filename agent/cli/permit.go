package cli

import (
	"encoding/json"
	"time"
)

// PermitServer is the name of the MCP server through which a CLI asks
// ctxfs for permission, and PermitTool the one tool it offers (SPEC 17:
// with `approval ask`, a CLI's tool use that needs permission waits for a
// person like a built-in tool's call).
const (
	PermitServer = "ctxfs"
	PermitTool   = "approve"
)

// Permit is how a run's permission prompts reach ctxfs: the command line
// of the stdio MCP server that answers them (the ctxfs binary as the CLI
// sees it, and its hidden command), the variables it is started with, and
// how long one answer may take (a person answers; the CLI must not give up
// first).
type Permit struct {
	Argv    []string
	Env     map[string]string
	Timeout time.Duration
}

// Permitter is an Adapter whose CLI lets a host decide its permission
// prompts (Claude Code's --permission-prompt-tool); the other CLIs decide
// them themselves, and `approval ask` does not reach them.
type Permitter interface {
	// PermitArgs are the arguments added to an Invocation's so that every
	// permission prompt of the run is asked of p's server, and nothing
	// skips the prompt.
	PermitArgs(p Permit) []string
}

// maxMCPTimeout is the largest per-server tool timeout Claude Code takes
// (milliseconds, a signed 32-bit number).
const maxMCPTimeout = 1<<31 - 1

// PermitArgs: the prompt tool is mcp__ctxfs__approve, served by the one
// MCP server --mcp-config names (--strict-mcp-config: no server of the
// user's configuration can take its name or its place); the permission
// mode is the default one, whatever the settings under HOME say
// (bypassPermissions or acceptEdits would skip the prompt), and prompts go
// to the host (never "none").
func (claudeCode) PermitArgs(p Permit) []string {
	timeout := min(p.Timeout.Milliseconds(), maxMCPTimeout)
	server := map[string]any{"type": "stdio", "command": p.Argv[0], "args": p.Argv[1:], "env": p.Env, "timeout": timeout}
	config, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{PermitServer: server}})
	return []string{"--permission-mode", "default", "--permission-prompts", "host",
		"--permission-prompt-tool", "mcp__" + PermitServer + "__" + PermitTool,
		"--mcp-config", string(config), "--strict-mcp-config"}
}
