package session

import (
	"fmt"
	"os"
	"strconv"
	"time"

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

// minCheckpointBytes keeps a journal file to several batches (each takes
// at least 4 KiB): below it every batch would start a new file.
const minCheckpointBytes = 16 << 10

// JournalFromEnv reads the journal's checkpoint settings:
// CTXFS_CHECKPOINT_EVERY (a duration; "0" keeps the default, a negative
// one checkpoints by size only) and CTXFS_CHECKPOINT_BYTES (the size at
// which the journal moves to a new file and the old one is checkpointed).
func JournalFromEnv(getenv func(string) string) (sealedlog.JournalConfig, error) {
	var c sealedlog.JournalConfig
	if v := getenv("CTXFS_CHECKPOINT_EVERY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return c, fmt.Errorf("CTXFS_CHECKPOINT_EVERY: %v", err)
		}
		c.CheckpointEvery = d
	}
	if v := getenv("CTXFS_CHECKPOINT_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < minCheckpointBytes {
			return c, fmt.Errorf("CTXFS_CHECKPOINT_BYTES: want at least %d bytes, got %q", minCheckpointBytes, v)
		}
		c.RotateAt = n
	}
	return c, nil
}

// openWAL replays what a previous server left in the journal (a damaged
// journal refuses the start: fsck --repair says what is lost) and starts a
// new one.
func (e *Engine) openWAL() error {
	cfg, err := JournalFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	e.wal, err = sealedlog.OpenJournal(e.admin, layout.JournalDir, layout.LocateLog(e.admin, e.sealKey), cfg)
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
