package agent

import (
	"encoding/json"
	"fmt"

	"github.com/ctxfs/ctxfs/agent/provider"
	"github.com/ctxfs/ctxfs/agent/tools"
)

// ToolAskUser is the tool that asks a person (SPEC 17).
const ToolAskUser = tools.AskUser

// toolError is a tool's error result as the model reads it.
func toolError(format string, args ...any) string {
	b, _ := json.Marshal(map[string]string{"error": fmt.Sprintf(format, args...)})
	return string(b)
}

func toolSpecs(names []string) []provider.Tool { return tools.Specs(names) }

func toolClass(name string) byte { return tools.Class(name) }
