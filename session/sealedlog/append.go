package sealedlog

import (
	"bytes"
	"fmt"
	"io"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
)

// pendingAppend is one Append call waiting for its batch to be durable.
type pendingAppend struct {
	data []byte
	off  int64
	err  error
	done bool
	// wake is signalled once: either the batch is done, or (done still
	// false) this caller has been made the committer.
	wake chan struct{}
}

// Append validates data as whole lines and appends it durably, returning
// the offset where it starts. Nothing is written unless every line is valid
// (EINVAL) and the log is provable (EIO). Concurrent calls share syncs: one
// committer writes everything pending as one batch, each call's bytes
// contiguous, and every caller returns once its batch is fdatasynced.
func (l *Log) Append(data []byte) (int64, error) {
	if err := validate(data); err != nil {
		err.Path = l.name()
		return 0, err
	}
	switch {
	case l.mem:
		return l.appendMemory(data), nil
	case l.j != nil:
		return l.appendJournaled(data, true)
	}
	return l.appendFile(data)
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

func (l *Log) appendMemory(data []byte) int64 {
	l.memMu.Lock()
	defer l.memMu.Unlock()
	off := int64(len(l.memBuf))
	l.memBuf = append(l.memBuf, data...)
	l.length.Store(int64(len(l.memBuf)))
	return off
}

// appendFile queues data and waits. The first caller to find no committer
// becomes it; after its own batch it hands the role to the oldest waiter,
// so no caller commits for others forever.
func (l *Log) appendFile(data []byte) (int64, error) {
	req := &pendingAppend{data: data, wake: make(chan struct{}, 1)}
	l.qmu.Lock()
	l.queue = append(l.queue, req)
	lead := !l.committing
	l.committing = true
	l.qmu.Unlock()
	if !lead {
		<-req.wake
		if req.done {
			return req.off, req.err
		}
	}
	l.qmu.Lock()
	batch := l.queue
	l.queue = nil
	l.qmu.Unlock()
	l.commit(batch)
	l.qmu.Lock()
	if len(l.queue) > 0 {
		l.queue[0].wake <- struct{}{} // promote: it commits the next batch
	} else {
		l.committing = false
	}
	l.qmu.Unlock()
	return req.off, req.err
}

// commit makes one batch durable (or fails it whole) and wakes its callers.
func (l *Log) commit(batch []*pendingAppend) {
	l.mu.Lock()
	off, err := l.writeBatch(batch)
	l.mu.Unlock()
	for _, r := range batch {
		r.off, r.err, r.done = off, err, true
		if err != nil {
			r.off = 0
		}
		off += int64(len(r.data))
		r.wake <- struct{}{}
	}
}

// writeBatch is the one place that appends and syncs: it prepares the
// batch and publishes it. It returns the batch's offset.
func (l *Log) writeBatch(batch []*pendingAppend) (int64, error) {
	buf := batch[0].data
	if len(batch) > 1 {
		var b bytes.Buffer
		for _, r := range batch {
			b.Write(r.data)
		}
		buf = b.Bytes()
	}
	p, err := l.prepare(buf)
	if err != nil {
		return 0, err
	}
	l.publish(p)
	return p.start, nil
}

// prepared is a batch that is written and synced but not yet part of the
// log: Size does not cover it, so no reader sees it, and the seal holds
// only an intent for it. publish makes it part of the log; abandon takes
// it back.
type prepared struct {
	start  int64
	intent *record
}

// prepare makes buf durable past the committed length. In order: check the
// log is provable; sync an intent record vouching for the new length; pwrite
// the batch at the committed length (never trusting O_APPEND) and sync it.
// A failure takes back whatever reached the file. Caller holds l.mu.
func (l *Log) prepare(buf []byte) (*prepared, error) {
	if err := l.checkLocked(); err != nil {
		return nil, err
	}
	start := l.Size()
	h, err := resumeHash(l.state)
	if err != nil {
		return nil, l.damaged("hash state does not resume: " + err.Error())
	}
	h.Write(buf)
	intent := newRecord(l.seq+1, start+int64(len(buf)), false, h, l.at.Bind)
	if err := writeRecord(l.seal, intent, l.at.Key); err != nil {
		// The intent may or may not be on disk; either way no byte of the
		// batch is, which is a state Open accepts. Retry reuses the slot.
		return nil, osError("append", l.sealName(), err)
	}
	if l.afterSeal != nil {
		l.afterSeal()
	}
	if err := l.writeSynced(buf, start); err != nil {
		l.undo(start, intent.seq)
		return nil, osError("append", l.name(), err)
	}
	return &prepared{start: start, intent: intent}, nil
}

// publish makes a prepared batch part of the log: acknowledged, visible to
// readers, and marked committed. Caller holds l.mu.
func (l *Log) publish(p *prepared) {
	l.adopt(p.intent)
	l.commitLazily()
	l.restamp()
}

// abandon takes back a prepared batch that will not be published (the
// other half of a pair failed): the file is cut back to the committed
// length and sealed so. Nobody saw the batch. Caller holds l.mu.
func (l *Log) abandon(p *prepared) { l.undo(p.start, p.intent.seq) }

// commitLazily marks the batch just made durable as committed, in the other
// seal slot and without a sync: it costs one small pwrite, not a third
// sync. A process that dies keeps it (the page cache survives); only a
// power loss can drop it, and then the intent record stands and Open treats
// the batch as a crash would leave it. Without it, a later cut of the last
// batch made behind our back could pass for an interrupted append.
func (l *Log) commitLazily() {
	r := l.record(l.seq+1, true)
	if _, err := l.seal.WriteAt(r.encode(l.at.Key), int64(r.seq%2)*slotSize); err == nil {
		l.seq, l.sealDone = r.seq, true
	}
}

// writeSynced pwrites buf at off and fdatasyncs the log.
func (l *Log) writeSynced(buf []byte, off int64) error {
	n, err := l.writeData(l.f, buf, off)
	if err == nil && n < len(buf) {
		err = io.ErrShortWrite
	}
	if err == nil {
		err = fdatasync(l.f)
	}
	l.syncs.Add(1)
	return err
}

// undo takes back a batch whose write failed: it cuts the log to the
// committed length and seals that length as committed (seq past the
// intent), so that the failed bytes are neither kept nor vouched for. If
// that fails too, the file may hold bytes nobody acknowledged, and the log
// becomes unprovable.
func (l *Log) undo(committed int64, intentSeq uint64) {
	err := l.f.Truncate(committed)
	if err == nil {
		err = l.f.Sync()
	}
	if err == nil {
		r := l.record(intentSeq+1, true) // Size is still the committed length
		if err = writeRecord(l.seal, r, l.at.Key); err == nil {
			l.seq, l.sealDone = r.seq, true
		}
	}
	if err != nil {
		l.bad = unprovable(l.name(), fmt.Sprintf("a failed append could not be undone: %v", err))
		return
	}
	l.restamp()
}

// AppendPair appends a to first and b to second as one unit: both are
// durable and published, or, when either is refused (an invalid line,
// EIO, ENOSPC, …), neither is: the half that was written is taken back
// before any reader could see it. A session's two logs use it, so that a
// refused send or a run's batch that cannot be recorded writes nothing.
// (A crash between the two halves may keep one of them: it was never
// acknowledged, and the engine closes what it began when the session
// loads.) Either may be empty. The two must be different logs.
func AppendPair(first *Log, a []byte, second *Log, b []byte) error {
	switch {
	case len(a) == 0:
		_, err := second.Append(b)
		return err
	case len(b) == 0:
		_, err := first.Append(a)
		return err
	}
	if err := validate(a); err != nil {
		err.Path = first.name()
		return err
	}
	if err := validate(b); err != nil {
		err.Path = second.name()
		return err
	}
	switch {
	case first.mem || second.mem:
		first.appendMemory(a)
		second.appendMemory(b)
		return nil
	case first.j != second.j:
		return abi.Errorf(syscall.EINVAL, "append", "%s and %s are not in one journal", first.name(), second.name())
	case first.j != nil:
		return appendPairJournaled(first, a, second, b)
	}
	unlock := lockPair(first, second)
	defer unlock()
	var pa, pb *prepared
	var ea, eb error
	done := make(chan struct{})
	go func() { pb, eb = second.prepare(b); close(done) }() // the two syncs overlap
	pa, ea = first.prepare(a)
	<-done
	switch {
	case ea != nil || eb != nil:
		if pa != nil {
			first.abandon(pa)
		}
		if pb != nil {
			second.abandon(pb)
		}
		if ea != nil {
			return ea
		}
		return eb
	}
	first.publish(pa)
	second.publish(pb)
	return nil
}

// lockPair locks two logs in a fixed order (their creation order), so that
// two pairs never wait on each other.
func lockPair(x, y *Log) (unlock func()) {
	if y.order < x.order {
		x, y = y, x
	}
	x.mu.Lock()
	y.mu.Lock()
	return func() { y.mu.Unlock(); x.mu.Unlock() }
}
