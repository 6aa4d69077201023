package agent

import (
	"github.com/ctxfs/ctxfs/agent/provider"
	"github.com/ctxfs/ctxfs/agent/tools"
)

// ToolAskUser is the tool that asks a person (SPEC 17).
const ToolAskUser = tools.AskUser

// toolSpecs are the tools a model run offers, in the providers' terms.
func toolSpecs(names []string) []provider.Tool { return tools.Specs(names) }

// toolClass is the perm letter a tool needs (tools.Class).
func toolClass(name string) byte { return tools.Class(name) }
