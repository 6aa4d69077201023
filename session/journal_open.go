package session

import (
	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/sealedlog"
)

// logPlace is where a session's log is, journaled by the engine.
func (e *Engine) logPlace(sessionRel, file string, identity []byte) sealedlog.Place {
	at := layout.LogPlace(e.root, e.sealKey, sessionRel, file, identity)
	at.Journal = e.wal
	return at
}

// openWAL replays what a previous server left in the journal (a damaged
// journal refuses the start: fsck --repair says what is lost) and starts a
// new one.
func (e *Engine) openWAL() error {
	var err error
	e.wal, err = sealedlog.OpenJournal(e.admin, layout.JournalDir, layout.LocateLog(e.admin, e.sealKey), e.cfg.Journal)
	return err
}

// refuseHeld makes a log unprovable while the journal's records for it are
// kept aside (a start could not recover it: sealedlog.Held): appending
// past them would build on bytes the journal says are not the log's end.
func (e *Engine) refuseHeld(s *sess, rel string, identity []byte) {
	for file, l := range map[string]*sealedlog.Log{abi.FileEvents: s.events, abi.FileMessages: s.msgs} {
		if sealedlog.Held(e.admin, layout.JournalDir, layout.LogPlace(e.admin, e.sealKey, rel, file, identity)) {
			l.Refuse(sealedlog.HeldWords)
		}
	}
}
