package cli

import (
	"encoding/json"
	"slices"
	"testing"
	"time"
)

// TestPermitArgs: Claude Code is told to ask the one ctxfs MCP server of
// its --mcp-config (strict) through mcp__ctxfs__approve, in the default
// permission mode, with prompts to the host and the server's timeout
// past the approval's (clamped to what Claude Code takes); the other
// CLIs let no host decide.
func TestPermitArgs(t *testing.T) {
	p := Permit{Argv: []string{"/usr/sbin/ctxfs", "__permit"}, Env: map[string]string{"CTX_CONTROL_SOCKET": "/run/x/control"}, Timeout: time.Hour}
	args := claudeCode{}.PermitArgs(p)
	flag := func(name string) string {
		i := slices.Index(args, name)
		if i < 0 || i+1 >= len(args) {
			t.Fatalf("%s missing from %q", name, args)
		}
		return args[i+1]
	}
	if flag("--permission-prompt-tool") != "mcp__ctxfs__approve" || flag("--permission-mode") != "default" || flag("--permission-prompts") != "host" || !slices.Contains(args, "--strict-mcp-config") {
		t.Errorf("args %q", args)
	}
	var config struct {
		MCPServers map[string]struct {
			Type, Command string
			Args          []string
			Env           map[string]string
			Timeout       int64
		}
	}
	if err := json.Unmarshal([]byte(flag("--mcp-config")), &config); err != nil {
		t.Fatal(err)
	}
	srv, ok := config.MCPServers["ctxfs"]
	if !ok || len(config.MCPServers) != 1 || srv.Type != "stdio" || srv.Command != "/usr/sbin/ctxfs" || !slices.Equal(srv.Args, []string{"__permit"}) ||
		srv.Env["CTX_CONTROL_SOCKET"] != "/run/x/control" || srv.Timeout != 3600000 {
		t.Errorf("--mcp-config %+v", config)
	}
	p.Timeout = 1000 * time.Hour
	if err := json.Unmarshal([]byte(claudeCode{}.PermitArgs(p)[slices.Index(args, "--mcp-config")+1]), &config); err != nil || config.MCPServers["ctxfs"].Timeout != maxMCPTimeout {
		t.Errorf("a timeout past Claude Code's largest: %+v %v", config, err)
	}
	for _, name := range []string{Codex, Gemini, OpenCode} {
		if _, asks := adapters[name].(Permitter); asks {
			t.Errorf("%s lets a host decide its prompts?", name)
		}
	}
}
