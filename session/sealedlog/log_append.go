package sealedlog

import (
	"bytes"
	"io"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
)

// Every append goes through the log's journal (Place.Journal): the log
// never syncs for an append itself. A log keeps three lengths:
//
//	sealedLen <= durableLen <= Size
//
// Size is what the log file holds and readers see: an append is written
// there at once (so a reader through the mount sees it when the write
// returns, and stat sizes are exact). durableLen is how much of it the
// journal holds durably; l.state and l.digest describe it. sealedLen is
// what the seal vouches for, brought up to durableLen by a checkpoint
// (journal_checkpoint.go).
//
// Bytes past the seal that the journal does not hold may exist only while
// the journal durably says so: before a log's first append in a journal
// generation, an intent record for it is made durable (one shared sync per
// log per generation), and replay cuts such a log back to what the journal
// holds. Without the intent, bytes past the seal and the journal are damage.

// Append validates data as whole lines and appends it durably, returning
// the offset where it starts. Nothing is written unless every line is valid
// (EINVAL) and the log is provable (EIO). It returns once the journal holds
// the lines durably: concurrent appends, of this log and every other, share
// the journal's syncs.
func (l *Log) Append(data []byte) (int64, error) {
	if err := validate(data); err != nil {
		err.Path = l.name()
		return 0, err
	}
	if l.mem {
		return l.appendMemory(data), nil
	}
	return l.appendJournaled(data, true)
}

// Write appends whole lines as a writer through the mount does (SPEC 6):
// validated, ordered and visible when it returns, durable only at Sync.
func (l *Log) Write(data []byte) error {
	if err := validate(data); err != nil {
		err.Path = l.name()
		return err
	}
	if l.mem {
		l.appendMemory(data)
		return nil
	}
	_, err := l.appendJournaled(data, false)
	return err
}

// Sync returns once everything appended to l so far is durable.
func (l *Log) Sync() error {
	if l.j == nil {
		return nil // a memory log, or one that never took an append
	}
	l.j.mu.Lock()
	seq := l.lastSeq
	l.j.mu.Unlock()
	return l.j.wait(seq)
}

// Validate is Append's judgement of data (whole lines, each one a log
// line), made before anything is written: a caller that must create
// something first (a session, for its first send) asks it beforehand, so
// that a refusal leaves the store as it was.
func Validate(data []byte) error {
	if err := validate(data); err != nil {
		return err
	}
	return nil
}

// validate checks that data is whole lines, each one a log line.
func validate(data []byte) *abi.Error {
	if len(data) == 0 || data[len(data)-1] != '\n' {
		return abi.Errorf(syscall.EINVAL, "append", "data must be whole lines, each ending in \\n")
	}
	for n, rest := 1, data; len(rest) > 0; n++ {
		i := bytes.IndexByte(rest, '\n')
		if err := abi.CheckLogLine(rest[:i]); err != nil {
			return abi.Errorf(syscall.EINVAL, "append", "%s", lineWords(err, n))
		}
		rest = rest[i+1:]
	}
	return nil
}

// AppendPair appends a to first and b to second as one unit: both are
// durable and published, or, when either is refused (an invalid line,
// EIO, ENOSPC, …), neither is: the half that was written is taken back
// before the unit is queued. A session's two logs use it, so that a
// refused send or a run's batch that cannot be recorded writes nothing.
// One journal batch holds both halves, so a crash keeps both or neither.
// Either may be empty. The two must be different logs of one journal.
func AppendPair(first *Log, a []byte, second *Log, b []byte) error {
	wait, err := BeginPair(first, a, second, b)
	if err != nil {
		return err
	}
	return wait()
}

// BeginPair is AppendPair in two steps, for a caller with work to do
// while the unit syncs: it returns once the unit is written and queued,
// or with its refusal (everything AppendPair refuses but a failed sync),
// nothing written; wait returns once both halves are durable, or with the
// journal's failure. Until wait returns nil the unit is not durable, and
// nothing of it may be acknowledged.
func BeginPair(first *Log, a []byte, second *Log, b []byte) (wait func() error, err error) {
	if len(a) == 0 && len(b) > 0 {
		first, a, second, b = second, b, nil, nil
	}
	if err := validate(a); err != nil {
		err.Path = first.name()
		return nil, err
	}
	recs := []*jrec{first.appendRecord(a)}
	if second != nil && len(b) > 0 {
		if err := validate(b); err != nil {
			err.Path = second.name()
			return nil, err
		}
		switch {
		case first.mem || second.mem:
			first.appendMemory(a)
			second.appendMemory(b)
			return noWait, nil
		case first.j != second.j:
			return nil, abi.Errorf(syscall.EINVAL, "append", "%s and %s are not in one journal", first.name(), second.name())
		}
		recs = append(recs, second.appendRecord(b))
	} else if first.mem {
		first.appendMemory(a)
		return noWait, nil
	}
	j, err := first.journal()
	if err != nil {
		return nil, err
	}
	seq, err := j.enqueueAppends(recs)
	if err != nil {
		return nil, err
	}
	return func() error { return j.wait(seq) }, nil
}

func noWait() error { return nil }

// appendJournaled writes data at the end of l and queues its record; when
// durable, it waits until the journal has it on disk. The bytes are
// visible to readers when it returns, and only then (or, refused, never).
func (l *Log) appendJournaled(data []byte, durable bool) (int64, error) {
	j, err := l.journal()
	if err != nil {
		return 0, err
	}
	rec := l.appendRecord(data)
	seq, err := j.enqueueAppends([]*jrec{rec})
	if err == nil && durable {
		err = j.wait(seq)
	}
	return rec.off, err
}

// journal is the journal l's appends go through. A log opened without
// one (Create for a session being made, a tool) is read, verified and
// closed, never appended to: it refuses, saying why (unprovable first).
func (l *Log) journal() (*Journal, error) {
	if l.j != nil {
		return l.j, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bad != nil {
		return nil, l.bad
	}
	if l.closed {
		return nil, abi.Errorf(syscall.EBADF, "append", "%s: log is closed", l.name())
	}
	return nil, abi.Errorf(syscall.EBADF, "append", "%s: log was opened without a journal: it is not appended to", l.name())
}

func (l *Log) appendRecord(data []byte) *jrec {
	return &jrec{kind: recAppend, path: l.at.Log, bind: l.at.Bind, data: data, log: l}
}

func (l *Log) intentRecord() *jrec {
	return &jrec{kind: recIntent, path: l.at.Log, bind: l.at.Bind, log: l}
}

// writeEnd writes data at the end of the log file, after checking that the
// log is provable. A failed write is taken back (cut to the old end), so
// nothing of a refused append stays. Caller holds l.appendMu, which
// orders l's appends as the journal's records (enqueueAppends).
func (l *Log) writeEnd(data []byte) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.jclosed {
		return 0, abi.Errorf(syscall.EBADF, "append", "%s: log is closed", l.name())
	}
	if err := l.checkLocked(); err != nil {
		return 0, err
	}
	off := l.Size()
	n, err := l.writeData(l.f, data, off)
	if err == nil && n < len(data) {
		err = io.ErrShortWrite
	}
	if err != nil {
		if terr := l.f.Truncate(off); terr != nil {
			l.bad = unprovable(l.name(), "a failed append could not be taken back: "+terr.Error())
		}
		l.restamp()
		return 0, osError("append", l.name(), err)
	}
	l.length.Store(off + int64(len(data)))
	l.restampLog() // the seal is untouched: one fstat, not two
	return off, nil
}

// takeBack cuts the log back to off: the other half of a unit was refused.
// Caller holds l.appendMu, so nothing was appended after it.
func (l *Log) takeBack(off int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.f.Truncate(off); err != nil {
		l.bad = unprovable(l.name(), "a refused append could not be taken back: "+err.Error())
	}
	l.length.Store(off)
	l.changes.Add(1) // after the length: a reader that sees the count sees the cut
	l.restamp()
}

// advance records that the journal holds [off, off+len(data)) durably
// (the committer calls it in journal order).
func (l *Log) advance(off int64, data []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if off != l.durableLen {
		return abi.Errorf(syscall.EIO, "append", "%s: durable record at %d, expected %d", l.name(), off, l.durableLen)
	}
	l.hasher.Write(data)
	l.state, l.digest = hashState(l.hasher), [32]byte(l.hasher.Sum(l.digest[:0])) // summed in place
	l.durableLen += int64(len(data))
	return nil
}
