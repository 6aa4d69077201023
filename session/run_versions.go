package session

import (
	"github.com/ctxfs/ctxfs/agent"
)

// keepVersion keeps a file's earlier content before a tool of run changes
// it (SPEC 17, session/versions).
func (s *sess) keepVersion(run string, c agent.ToolCall, before agent.FileBefore) error {
	return nil
}
