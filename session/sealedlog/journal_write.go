package sealedlog

import (
	"errors"
	"log/slog"
	"os"
	"path"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
)

// enqueueAppends writes each record's data at the end of its log and
// queues the records as one unit (all or none of them become durable),
// returning its number. The unit holds its logs' append locks from the
// writes until it is queued, so that the order of offsets in a log is the
// order of its records in the journal; the journal's own lock is not held
// while it writes, so that appends to other logs write at the same time
// (on a store on a distributed filesystem each write is a round trip
// through that filesystem's client: docs/benchmarks.md#appends-to-other-logs-write-at-once-the-runs-file-written-in-turns).
// A log's first append in a journal generation first waits for its intent
// record (admit). The unit is charged to its logs' payers first
// (takeUnit: EDQUOT past a home's bound on its history), and given back
// when it is not written.
func (j *Journal) enqueueAppends(recs []*jrec) (uint64, error) {
	first, second := unitLocks(recs)
	first.appendMu.Lock()
	defer first.appendMu.Unlock()
	if second != nil {
		second.appendMu.Lock()
		defer second.appendMu.Unlock()
	}
	if err := takeUnit(recs); err != nil {
		return 0, err // refused before anything is written
	}
	room, err := j.admit(recs)
	if err != nil {
		giveUnit(recs)
		return 0, err
	}
	seq, err := j.queueWritten(recs, room, j.writeUnit(recs))
	if err != nil {
		giveUnit(recs) // writeUnit took back what it wrote
	}
	return seq, err
}

// unitLocks are the logs whose append locks a unit takes, in the order
// it takes them (their order, so that two units never wait for each
// other): a unit is one record or two (BeginPair); second is nil when
// there is one log.
func unitLocks(recs []*jrec) (first, second *Log) {
	if len(recs) > 2 {
		panic("sealedlog: a unit of more than two records")
	}
	first = recs[0].log
	if len(recs) == 2 && recs[1].log != first {
		second = recs[1].log
		if second.order < first.order {
			first, second = second, first
		}
	}
	return first, second
}

// admit lets a unit write: its logs' intents are durable in the current
// generation, its room in the journal is reserved, and it is counted in
// flight until queueWritten, so that no generation starts while it
// writes (rotate: every byte written to a log before a rotation must be
// covered by a record queued before it, or by an intent in the new
// file). Caller holds the unit's append locks.
func (j *Journal) admit(recs []*jrec) (int64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for {
		for j.rotating {
			j.quiet.Wait()
		}
		wait, err := j.intents(recs)
		if err != nil {
			return 0, err
		}
		if wait == 0 {
			break
		}
		j.mu.Unlock()
		err = j.wait(wait)
		j.mu.Lock()
		if err != nil {
			return 0, err
		}
	}
	room := unitRoom(recs)
	if err := j.reserve(room); err != nil {
		return 0, err
	}
	j.inflight++
	j.inflightRoom += room
	return room, nil
}

// writeUnit writes each record's data at the end of its log, asking the
// gate before each write; a refusal takes back what the unit wrote.
// Caller holds the unit's append locks, not j.mu.
func (j *Journal) writeUnit(recs []*jrec) error {
	for i, r := range recs {
		off, err := int64(0), j.gateStep() // asked before each write at a log's end
		if err == nil {
			off, err = r.log.writeEnd(r.data)
		}
		if err != nil {
			for _, w := range recs[:i] {
				w.log.takeBack(w.off) // the unit is all or nothing
			}
			return err
		}
		r.off = off
	}
	return nil
}

// queueWritten ends a unit's flight: written (werr nil), it is queued and
// its number returned. Caller holds the unit's append locks.
func (j *Journal) queueWritten(recs []*jrec, room int64, werr error) (uint64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.inflight--
	j.inflightRoom -= room
	if j.inflight == 0 {
		j.quiet.Broadcast() // a rotation waits for this
		if j.closing {
			j.work.Signal() // the committer leaves only once nothing is in flight
		}
	}
	if werr != nil {
		return 0, werr
	}
	j.mark("log written")
	seq := j.push(recs)
	for _, r := range recs {
		r.log.lastSeq, r.log.lastGen = seq, j.gen
	}
	return seq, nil
}

// quietForRotation waits until no unit is in flight, holding new ones
// back until rotationDone. Caller holds j.mu (released while it waits)
// and is the committer.
func (j *Journal) quietForRotation() {
	j.rotating = true
	for j.inflight > 0 {
		j.quiet.Wait()
	}
}

// rotationDone lets units write again.
func (j *Journal) rotationDone() {
	j.rotating = false
	j.quiet.Broadcast()
}

// intents queues an intent record for each log of recs that has none in
// the current generation, and returns the unit to wait for before writing
// (0: every intent is durable). Caller holds j.mu.
func (j *Journal) intents(recs []*jrec) (uint64, error) {
	if err := j.usable(); err != nil {
		return 0, err
	}
	var wait uint64
	for _, r := range recs {
		l := r.log
		if l.intentGen != j.gen {
			if err := j.reserve(unitRoom([]*jrec{l.intentRecord()})); err != nil {
				return 0, err
			}
			l.intentGen, l.intentSeq = j.gen, j.push([]*jrec{l.intentRecord()})
		}
		if l.intentSeq > j.durable {
			wait = max(wait, l.intentSeq)
		}
	}
	return wait, nil
}

// usable is nil while the journal takes records. Caller holds j.mu.
func (j *Journal) usable() error {
	switch {
	case j.broken != nil:
		return j.broken
	case j.closing:
		return abi.Errorf(syscall.EIO, "append", "the journal is closed")
	}
	return j.checkGate()
}

// enqueue queues a unit that writes nothing to a log (a retire record).
func (j *Journal) enqueue(recs []*jrec) (uint64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.usable(); err != nil {
		return 0, err
	}
	if err := j.reserve(unitRoom(recs)); err != nil {
		return 0, err
	}
	return j.push(recs), nil
}

// unitRoom is the most room a unit can take in a journal file: as if alone
// in its batch.
func unitRoom(recs []*jrec) int64 {
	need := 0
	for _, r := range recs {
		need += r.size()
	}
	return batchSize(need)
}

// push queues a unit whose room is reserved, and wakes the committer
// when that makes a commit due (a unit someone waits for wakes it in
// wait). Caller holds j.mu.
func (j *Journal) push(recs []*jrec) uint64 {
	if j.lazySince.IsZero() {
		j.lazySince = time.Now()
		if !j.lazyArmed {
			j.lazyArmed = true
			j.lazyTimer.Reset(commitDelay)
		}
	}
	j.seq++
	j.queue = append(j.queue, recs...)
	j.queue[len(j.queue)-1].last = j.seq
	j.queued += unitRoom(recs)
	j.stats.Units++
	if j.commitDue() {
		j.work.Signal()
	}
	return j.seq
}

// lazyTick wakes the committer once the oldest queued unit has waited
// commitDelay, or waits again for what is left of it.
func (j *Journal) lazyTick() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.lazyArmed = false
	if j.lazySince.IsZero() {
		return
	}
	if left := commitDelay - time.Since(j.lazySince); left > 0 {
		j.lazyArmed = true
		j.lazyTimer.Reset(left)
		return
	}
	j.work.Signal()
}

// reserve makes sure the current file has room for n more bytes past what
// is queued, so that a full disk refuses an append before it is written
// rather than after it was acknowledged. Caller holds j.mu. Every batch
// the committer writes lies below alloc (end+queued <= alloc), which is
// what lets reserve write zeros from alloc on while it writes.
//
// The room is written with zeros, not fallocated: a batch then overwrites
// blocks the file already has, and its fdatasync flushes data alone
// (into fallocated room every sync also wrote the inode:
// docs/benchmarks.md#journal-room-written-with-zeros). The zeros' own
// allocation is made durable by the first batch's sync in them. Replay
// reads a zero header past the last
// batch as the end (the newest file may end so; an older one is cut to its
// last batch when the committer leaves it: rotate).
func (j *Journal) reserve(n int64) error {
	want := j.end + j.queued + j.inflightRoom + n
	if want <= j.alloc {
		return nil
	}
	step := max(want-j.alloc, journalReserveStep)
	err := writeZeros(j.f, j.alloc, step)
	if errors.Is(err, syscall.ENOSPC) && step > want-j.alloc {
		step = want - j.alloc
		err = writeZeros(j.f, j.alloc, step)
	}
	if err != nil {
		j.f.Truncate(j.alloc) // what was written of the room is not kept
		return osError("append", j.root.Show(path.Join(j.dir, journalName(j.gen))), err)
	}
	j.alloc += step
	return nil
}

// zeros is what writeZeros writes, a step at a time.
var zeros = make([]byte, journalReserveStep)

// writeZeros writes n zero bytes at off.
func writeZeros(f *os.File, off, n int64) error {
	for n > 0 {
		k := min(n, int64(len(zeros)))
		if _, err := f.WriteAt(zeros[:k], off); err != nil {
			return err
		}
		off, n = off+k, n-k
	}
	return nil
}

// wait returns once unit seq is durable, or the journal broke. When no
// batch is being written, the waiter writes it itself (leader commit):
// handing the batch to the committer goroutine and being woken by it
// were two wake-ups per commit on a send's path
// (docs/benchmarks.md#send-path).
// Appends queued during a commit wait for the next one, which the
// committer writes.
func (j *Journal) wait(seq uint64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.want = max(j.want, seq)
	for j.durable < seq && j.broken == nil {
		if !j.committing {
			j.commitOnce()
			if j.commitDue() || j.rotateDue() || j.closing {
				j.work.Signal() // what was queued meanwhile
			}
			continue
		}
		done := j.nextDone
		if seq <= j.flight {
			done = j.flightDone
		}
		j.mu.Unlock()
		<-done
		j.mu.Lock()
	}
	if j.durable >= seq {
		return nil
	}
	return j.broken
}

// commitLoop is the committer: it writes the batches nobody waiting
// writes (wait), one per turn, holding every unit queued meanwhile, and
// starts the next file when the current one is due.
func (j *Journal) commitLoop() {
	j.mu.Lock()
	defer j.mu.Unlock()
	for {
		for j.committing || !j.commitDue() && !j.rotateDue() && !j.drained() {
			j.work.Wait()
		}
		if j.drained() {
			return
		}
		j.commitOnce()
	}
}

// commitOnce starts the next file if the current one is due, then writes
// everything queued as one batch and makes it durable. Caller holds j.mu
// (released while the batch is written) and no batch is being written:
// it is the committer until it returns.
func (j *Journal) commitOnce() {
	j.committing = true
	defer func() { j.committing = false }()
	if j.rotateDue() && j.broken == nil && j.checkGate() == nil {
		j.quietForRotation()
		j.rotate()
		j.rotationDone()
	}
	batch := j.queue
	j.queue, j.queued, j.lazySince = nil, 0, time.Time{}
	if len(batch) == 0 {
		return
	}
	last := batch[len(batch)-1].last
	f, off, gen, num := j.f, j.end, j.gen, j.batchNum
	var buf []byte
	if j.broken == nil {
		j.buf = encodeBatch(j.buf, gen, num, j.token, batch)
		buf = j.buf
		j.end += int64(len(buf))
		j.batchNum++
		if j.started.IsZero() {
			j.started = time.Now()
		}
	}
	done := j.nextDone
	j.flight, j.flightDone, j.nextDone = last, done, make(chan struct{})
	j.mu.Unlock()
	err := j.broken
	var gateErr error
	if buf != nil {
		if gateErr = j.gateErr(); gateErr == nil {
			err = j.write(f, buf, off)
		}
		if err == nil && gateErr == nil {
			gateErr = j.gateErr() // after the sync, before anyone hears of it
		}
	}
	if err == nil && gateErr == nil {
		err = advance(batch)
	}
	j.mu.Lock()
	if gateErr != nil {
		j.shutGate(gateErr)
	}
	if err != nil && j.broken == nil {
		// Clients get the words, never the store's paths; the log has all.
		j.broken = abi.Errorf(syscall.EIO, "append", "the write-ahead journal failed, nothing more is recorded until the server restarts: %s", abi.ErrnoName(abi.Errno(err)))
		slog.Error("journal failed", "err", err)
	}
	if j.broken == nil {
		j.durable = last
		for _, r := range batch {
			if r.kind == recAppend {
				j.dirty[r.log] = struct{}{}
			}
		}
	}
	j.stats.Batches++
	close(done)
	if cap(j.buf) > lazyMax {
		j.buf = nil // a rare big batch's buffer is not kept
	}
}

// write puts one batch at off and makes it durable.
func (j *Journal) write(f *os.File, buf []byte, off int64) error {
	if _, err := f.WriteAt(buf, off); err != nil {
		return err
	}
	j.mark("batch written")
	j.mu.Lock()
	j.stats.Syncs++
	j.mu.Unlock()
	if err := fdatasync(f); err != nil {
		return err
	}
	j.mark("batch durable")
	return nil
}

// advance tells each log of a durable batch how much of it is durable.
func advance(batch []*jrec) error {
	for _, r := range batch {
		if r.kind != recAppend {
			continue
		}
		if err := r.log.advance(r.off, r.data); err != nil {
			return err
		}
	}
	return nil
}

// drained: the journal closes and nothing is queued or in flight: the
// committer may leave. Caller holds j.mu.
func (j *Journal) drained() bool {
	return j.closing && len(j.queue) == 0 && j.inflight == 0
}

// commitDue: the queue holds a unit someone waits for, or holds much, or
// has held a unit for commitDelay. Appends nobody waits for yet (writes
// through the mount before their fsync or close; value files) wait for
// one of those: a stream of writes then costs no sync of its own, as on
// a disk filesystem, where a write returns from the page cache. Caller
// holds j.mu.
func (j *Journal) commitDue() bool {
	if len(j.queue) == 0 {
		return false
	}
	return j.want > j.durable || j.closing || j.queued >= lazyMax || time.Since(j.lazySince) >= commitDelay
}
