package session

import (
	"path"

	"github.com/ctxfs/ctxfs/agent"
	"github.com/ctxfs/ctxfs/agent/tools"
	"github.com/ctxfs/ctxfs/session/versions"
)

// keepVersion keeps a file's earlier content before a tool of run changes
// it (SPEC 17, session/versions): its content (modify) or its absence
// (create), bounded by the session's versions limit (EDQUOT: the tool's
// change is refused). A temp session has no store, so no versions.
func (s *sess) keepVersion(run string, c agent.ToolCall, before agent.FileBefore) error {
	if s.rel == "" {
		return nil
	}
	st, err := versions.Open(s.e.root, s.e.sealKey, s.rel)
	if err != nil {
		return err
	}
	st.Limit = s.e.limits.VersionBytes
	st.Charge = s.e.historyCharge(s.ref.Home)
	action, content := versions.Create, []byte(nil)
	switch {
	case before.Existed && c.Name == tools.FSRemove: // a restore takes away a file
		action, content = versions.Delete, append([]byte{}, before.Content...)
	case before.Existed:
		action, content = versions.Modify, append([]byte{}, before.Content...)
	}
	if _, err := st.Keep(run, c.ID, before.Path, content, action); err != nil {
		return err
	}
	// The index's size, and versions/ in the session's listing (made by
	// the first Keep): both announced, so no mount serves them stale.
	s.e.changed(st.IndexRel(), path.Dir(st.IndexRel()))
	return nil
}
