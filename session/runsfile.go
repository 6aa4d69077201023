package session

import (
	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/runsfile"
)

// The runs under way are noted in the runs file (package runsfile), so
// that the next start finds the sessions whose runs a crash interrupted.

func (e *Engine) markRunning(rn *run) {
	if rn.s.rel != "" {
		e.running.Start(rn.id, rn.s.ref.Rel())
	}
}

func (e *Engine) forgetRun(rn *run) {
	e.mu.Lock()
	delete(e.runs, rn.id)
	e.mu.Unlock()
	e.limits.Runs.Give(rn.caller)
	if rn.s.rel != "" {
		e.running.End(rn.id)
	}
}

// closeInterrupted loads every session that had a run in progress when the
// previous server stopped (loading closes such runs: closeInterruptedRun),
// then starts a new runs file.
func (e *Engine) closeInterrupted() error {
	e.running = &runsfile.File{} // made below; until then it keeps lines (Keep)
	for _, rel := range runsfile.Interrupted(e.admin) {
		if ct, name, ok := layout.ParseContainerRel(rel); ok && abi.ValidSessionName(name) {
			if _, release, err := e.lookup(layout.Ref{Container: ct, Name: name}); err == nil {
				release()
			}
		}
	}
	return e.running.Create(e.admin)
}
