package agent

import (
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/agent/modelapi"
	"github.com/ctxfs/ctxfs/agent/tools"
)

// ToolAskUser is the tool that asks a person (SPEC 17).
const ToolAskUser = tools.AskUser

// toolSpecs are the tools a model run offers, in the providers' terms.
// agent.create (toolcreate.go) among them where it is named.
func toolSpecs(names []string) []modelapi.Tool {
	specs := tools.Specs(names)
	for _, n := range names {
		if n == def.ToolAgentCreate {
			specs = append(specs, agentCreateSpec)
		}
	}
	return specs
}
