package sealedlog

import (
	"errors"
	"log/slog"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
)

// The write gate (JournalConfig.Gate): whether this host may still write
// the store. A writer host that may have lost its lease must stop
// acknowledging before the lease can expire (SPEC 19): the journal asks
// the gate before it writes a batch, and again after the batch's sync,
// before the waiters hear that it is durable; appends ask it before they
// write at a log's end; checkpoints before each seal and before a journal
// file is removed. A closed gate closes the journal for good, as an I/O
// error does: what a new writer replays is fenced (journal_fence.go), and
// this host's view of the store is no longer the store.

// gateErr asks the gate (nil: open). Called without j.mu held or with it:
// the gate is the caller's cheap check of its lease.
func (j *Journal) gateErr() error {
	if j == nil || j.gate == nil {
		return nil
	}
	return j.gate()
}

// shutGate closes the journal for good after the gate said err: every
// waiter and every later append gets an error wrapping EAGAIN. Caller
// holds j.mu.
func (j *Journal) shutGate(err error) {
	j.shut.Store(true)
	if j.broken != nil {
		return
	}
	j.broken = abi.Errorf(syscall.EAGAIN, "append", "this host may no longer write the store (%s): nothing more is recorded here", storeWords(err))
	slog.Warn("journal: the write gate closed; nothing more is written", "err", err)
	j.wakeWaiters()
}

// checkGate asks the gate and, when it is closed, closes the journal.
// Caller holds j.mu.
func (j *Journal) checkGate() error {
	if err := j.gateErr(); err != nil {
		j.shutGate(err)
		return j.broken
	}
	return nil
}

// gateStep asks the gate before a checkpoint's write; a closed gate
// closes the journal and fails the checkpoint (its file stays, for the
// next writer's replay).
func (j *Journal) gateStep() error {
	if j == nil {
		return nil
	}
	if j.shut.Load() {
		return j.err() // closed by the gate or Abandon: no seal, no removal
	}
	if err := j.gateErr(); err != nil {
		j.mu.Lock()
		defer j.mu.Unlock()
		j.shutGate(err)
		return j.broken
	}
	return nil
}

// storeWords is an error's words for a client: its errno's name when it
// has one, never a store path.
func storeWords(err error) string {
	var e *abi.Error
	if errors.As(err, &e) && e.Msg != "" {
		return e.Msg
	}
	return abi.ErrnoName(abi.Errno(err))
}

// Abandon stops the journal of a writer host that lost its lease: nothing
// more is written to it, no log is sealed and no file removed (they stay
// for the next writer's replay, which the fence keeps this host's later
// batches out of); every waiter and every later append gets an error
// wrapping EAGAIN at once. It does not wait for the committer and the
// checkpointer to leave (a batch's sync may hang on a store cut off from
// this host); Close does, and then only reports that error.
func (j *Journal) Abandon() {
	j.mu.Lock()
	j.shutGate(abi.Errorf(syscall.EAGAIN, "abandon", "its lease was lost"))
	already := j.closing
	j.closing = true
	j.mu.Unlock()
	if !already {
		go j.stop(false)
	}
}
