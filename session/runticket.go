package session

import "github.com/ctxfs/ctxfs/session/quota"

// Limits are the engine's quotas, for its transports (connections,
// handles) and itself (runs).
func (e *Engine) Limits() *quota.Limits { return e.limits }

// runTicket is a place in a caller's quota of runs, taken before anything
// of a send is written: spent when a run starts (the run gives it back
// when it is forgotten), else cancelled.
type runTicket struct {
	q    *quota.Quota
	uid  uint32
	held bool
}

func (e *Engine) takeRun(uid uint32) (*runTicket, error) {
	if err := e.limits.Runs.Take(uid); err != nil {
		return nil, err
	}
	return &runTicket{q: e.limits.Runs, uid: uid, held: true}, nil
}

// spend hands the place to a run that started.
func (t *runTicket) spend() { t.held = false }

// cancel gives the place back unless a run holds it. Nil-safe.
func (t *runTicket) cancel() {
	if t != nil && t.held {
		t.q.Give(t.uid)
		t.held = false
	}
}
