package session

import (
	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/versions"
)

// historyCharge is who pays for the history of a session of home, its
// logs' appends and its versions (quota.History): the home, a uid's or a
// shared space's as a whole, whoever writes (homeCounted); nil for root's.
func (e *Engine) historyCharge(home string) quota.Charge {
	if !homeCounted(home) {
		return nil
	}
	return e.limits.History.Of(home)
}

// historyFiles are the files of a session counted as history, beside its
// versions: its logs, its meta.json and its snapshots of the rules and
// skills a run had (AGENTS.md, up to 1 MiB read from its user's root/, in
// every session a run of it is made in: uncharged, one user's sessions
// made the store keep 1 MiB each past the bound, 1,000 times what their
// logs held).
var historyFiles = append([]string{abi.FileMeta, abi.FileAgentsMD, abi.FileSkillsMD}, layout.SessionLogs...)

// firstHistoryCount is home's history counted at its first use after a
// start (quota.History's count). It is the first thing of the start to
// look at a uid's archive, so it removes what interrupted deletions of
// archived sessions left there (uncounted, hidden) before it counts.
func (e *Engine) firstHistoryCount(home string) int64 {
	e.removeArchiveLeftovers(home)
	return e.historyOf(home)
}

// historyOf counts the bytes of history home holds: those of every one of
// its sessions, live and archived.
func (e *Engine) historyOf(home string) int64 {
	var n int64
	for _, s := range layout.HomeSessionDirs(e.root, home, true) {
		n += e.historyBytes(s)
	}
	return n
}

// historyBytes is what the session directory rel holds of history: its
// logs, its meta.json (its user's to write, up to 1 MiB) and its
// versions (contents and index). Its seals, identity and other values
// are small and fixed in number; its context/ is the free trees'
// (quota.FreeQuota).
func (e *Engine) historyBytes(rel string) int64 {
	var n int64
	for _, f := range historyFiles {
		n += e.heldSize(rel + "/" + f)
	}
	v, _ := versions.Used(e.root, rel)
	return n + v
}

// heldSize is the size of the session's file rel as the engine serves
// it: the value waiting to be written behind (a snapshot's), else the
// store's file; 0 when there is none.
func (e *Engine) heldSize(rel string) int64 {
	if v, ok := e.derived.Value(rel); ok {
		return int64(len(v.Data))
	}
	if st, err := e.root.Lstat(rel); err == nil {
		return st.Size
	}
	return 0
}

// takeHistory charges n bytes of history to home's payer, if any, before
// they are written (EDQUOT past its bound: nothing to write); undo gives
// them back when they were not written after all.
func (e *Engine) takeHistory(home string, n int64) (undo func(), err error) {
	c := e.historyCharge(home)
	if c == nil {
		return func() {}, nil
	}
	if err := c.Take(n); err != nil {
		return nil, err
	}
	return func() { c.Give(n) }, nil
}

// historyRoom refuses with EDQUOT, as the logs would, n bytes of history
// that home has no room for; it charges nothing (a check before a send or
// an import makes what comes ahead of its records: the session, the
// caller's root/, an agent; the records are charged as they are
// appended).
func (e *Engine) historyRoom(home string, n int64) error {
	if !homeCounted(home) {
		return nil
	}
	return e.limits.History.Room(home, n)
}

// deletedHistory is what the session r, about to be deleted, holds of its
// home's history, for the delete to give back. The home is counted first:
// a count made after the delete would not find those bytes, and they
// would be given back twice. The session is out of the engine, its logs
// closed: nothing is appended to it meanwhile.
func (e *Engine) deletedHistory(r layout.Ref) int64 {
	if !e.countHistory(r.Home) {
		return 0
	}
	return e.historyBytes(r.Rel())
}

// countHistory has home's history counted, if it is counted
// (historyCharge), and says whether it is.
func (e *Engine) countHistory(home string) bool {
	if !homeCounted(home) {
		return false
	}
	e.limits.History.Held(home)
	return true
}

// chargeResize charges home's payer for the file rel (meta.json, a
// snapshot) about to be replaced by one of size bytes: what it grows by
// is taken now (EDQUOT past the bound, nothing to write); done(written)
// gives that back when the file was not written, and what it shrank by
// when it was. The caller keeps anyone else from replacing rel
// meanwhile.
func (e *Engine) chargeResize(home, rel string, size int64) (done func(written bool), err error) {
	old := e.heldSize(rel)
	undo, err := e.takeHistory(home, size-old)
	if err != nil {
		return nil, err
	}
	return func(written bool) {
		switch {
		case !written:
			undo()
		case size < old:
			if c := e.historyCharge(home); c != nil {
				c.Give(old - size)
			}
		}
	}, nil
}
