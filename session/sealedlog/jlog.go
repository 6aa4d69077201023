package sealedlog

import (
	"io"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
)

// A journaled log (Place.Journal set) keeps three lengths:
//
//	sealedLen <= durableLen <= Size
//
// Size is what the log file holds and readers see: an append is written
// there at once (so a reader through the mount sees it when the write
// returns, and stat sizes are exact). durableLen is how much of it the
// journal holds durably; l.state and l.digest describe it. sealedLen is
// what the seal vouches for, brought up to durableLen by a checkpoint.
//
// Bytes past the seal that the journal does not hold may exist only while
// the journal durably says so: before a log's first append in a journal
// generation, an intent record for it is made durable (one shared sync per
// log per generation), and replay cuts such a log back to what the journal
// holds. Without the intent, bytes past the seal and the journal are damage.

// appendJournaled writes data at the end of l and queues its record; when
// durable, it waits until the journal has it on disk. The bytes are
// visible to readers when it returns, and only then (or, refused, never).
func (l *Log) appendJournaled(data []byte, durable bool) (int64, error) {
	rec := l.appendRecord(data)
	seq, err := l.j.enqueueAppends([]*jrec{rec})
	if err == nil && durable {
		err = l.j.wait(seq)
	}
	return rec.off, err
}

// appendPairJournaled queues both halves as one unit: one batch holds
// both or, after a crash, neither.
func appendPairJournaled(first *Log, a []byte, second *Log, b []byte) error {
	seq, err := first.j.enqueueAppends([]*jrec{first.appendRecord(a), second.appendRecord(b)})
	if err == nil {
		err = first.j.wait(seq)
	}
	return err
}

func (l *Log) appendRecord(data []byte) *jrec {
	return &jrec{kind: recAppend, path: l.at.Log, bind: l.at.Bind, data: data, log: l}
}

func (l *Log) intentRecord() *jrec {
	return &jrec{kind: recIntent, path: l.at.Log, bind: l.at.Bind, log: l}
}

// Write appends whole lines as a writer through the mount does (SPEC 6):
// validated, ordered and visible when it returns, durable only at Sync.
// A log without a journal makes every append durable at once.
func (l *Log) Write(data []byte) error {
	if err := validate(data); err != nil {
		err.Path = l.name()
		return err
	}
	switch {
	case l.mem:
		l.appendMemory(data)
		return nil
	case l.j == nil:
		_, err := l.appendFile(data)
		return err
	}
	_, err := l.appendJournaled(data, false)
	return err
}

// Sync returns once everything appended to l so far is durable.
func (l *Log) Sync() error {
	if l.j == nil {
		return nil
	}
	l.j.mu.Lock()
	seq := l.lastSeq
	l.j.mu.Unlock()
	return l.j.wait(seq)
}

// writeEnd writes data at the end of the log file, after checking that the
// log is provable. A failed write is taken back (cut to the old end), so
// nothing of a refused append stays. Caller holds j.mu, which orders every
// log's appends as the journal's records.
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
// Caller holds j.mu, so nothing was appended after it.
func (l *Log) takeBack(off int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.f.Truncate(off); err != nil {
		l.bad = unprovable(l.name(), "a refused append could not be taken back: "+err.Error())
	}
	l.length.Store(off)
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
	l.state, l.digest = hashState(l.hasher), [32]byte(l.hasher.Sum(nil))
	l.durableLen += int64(len(data))
	return nil
}

// checkpoint makes the durable bytes durable in the log file too and seals
// them, so that the journal no longer needs to hold them. The log's lock
// is held only to read what to seal: appends go on meanwhile.
func (l *Log) checkpoint() error {
	l.mu.Lock()
	if l.closed || l.bad != nil || l.seal == nil {
		l.mu.Unlock()
		return nil
	}
	r := l.record(0, true)
	l.mu.Unlock()
	return l.sealAt(r)
}

// sealAt syncs the log file and writes r (seq filled in here) to the seal.
func (l *Log) sealAt(r *record) error {
	l.sealMu.Lock()
	defer l.sealMu.Unlock()
	if l.sealDone && l.sealedLen == r.length {
		return nil
	}
	l.fdMu.RLock()
	err := fdatasync(l.f)
	l.fdMu.RUnlock()
	if err != nil {
		return osError("checkpoint", l.name(), err)
	}
	r.seq = l.seq + 1
	if err := writeRecord(l.seal, r, l.at.Key); err != nil {
		return osError("checkpoint", l.sealName(), err)
	}
	l.seq, l.sealDone, l.sealedLen = r.seq, true, r.length
	return nil
}

// closeJournaled stops new appends, waits until the journal holds all of
// l, checkpoints it and, when the journal may still hold records of it,
// records durably that it is retired (the log may now move or go away).
// Caller then closes the files.
func (l *Log) closeJournaled() error {
	j := l.j
	j.mu.Lock()
	l.jclosed = true
	seq, gen := l.lastSeq, l.lastGen
	j.mu.Unlock()
	if err := j.wait(seq); err != nil {
		return err
	}
	if err := l.checkpoint(); err != nil || seq == 0 || !j.holds(gen) {
		return err
	}
	l.mu.Lock()
	length := l.durableLen
	l.mu.Unlock()
	useq, err := j.enqueue([]*jrec{{kind: recRetire, path: l.at.Log, bind: l.at.Bind, off: length}})
	if err == nil {
		err = j.wait(useq)
	}
	return err
}

// holds reports whether the journal's files may still hold records of
// generation gen.
func (j *Journal) holds(gen uint64) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return gen >= j.live
}
