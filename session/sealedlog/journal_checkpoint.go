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

// rotateDue: the current file is big or old enough to be checkpointed.
// Caller holds j.mu.
func (j *Journal) rotateDue() bool {
	if j.end == 0 {
		return false
	}
	return j.end >= j.rotateAt || (j.checkpointEvery > 0 && time.Since(j.started) >= j.checkpointEvery)
}

// rotate starts the next generation's file and hands the current one to
// the checkpointer. The checkpointer first waits for every unit queued now
// (after), so that every byte written to a log before the rotation is
// covered by durable records when the old file goes; a log's next append
// asks for an intent in the new file. Caller (the committer) holds j.mu,
// and no unit is in flight (quietForRotation);
// the file creation holds up appenders for one directory sync, once per
// generation.
func (j *Journal) rotate() {
	// The old file's zero room is cut off, durably, before the new file
	// exists: replay takes zeros past the last batch as the end of the
	// newest file only, so an older file must end at its last batch.
	if err := cutRoom(j.f, j.end); err != nil {
		slog.Warn("journal: cannot cut the current file to its batches; it keeps growing", "err", err)
		return
	}
	f, gen, err := j.create(j.gen + 1)
	if err != nil {
		slog.Warn("journal: cannot start a new file; the current one keeps growing", "err", err)
		return
	}
	j.mark("next file made")
	old := &generation{gen: j.gen, f: j.f, dirty: j.dirty, values: j.values}
	j.values = map[string]*valueChange{}
	j.gen = gen
	j.f, j.end, j.alloc, j.batchNum, j.started = f, 0, 0, 0, time.Time{}
	// What is queued was given room in the old file; it goes into this
	// one. Room past alloc is written with zeros by reserve, so alloc must
	// never fall below what is promised, or zeros would land on a batch.
	if err := j.reserve(0); err != nil {
		j.alloc = j.queued // not zeroed: those batches extend the file
	}
	j.dirty = map[*Log]struct{}{}
	old.after = j.seq
	j.leave(old)
}

// cutRoom truncates f to end and syncs it.
func cutRoom(f *os.File, end int64) error {
	if err := f.Truncate(end); err != nil {
		return err
	}
	return f.Sync()
}

// leave hands a generation to the checkpointer. Caller holds j.mu.
func (j *Journal) leave(g *generation) {
	j.pending = append(j.pending, g)
	j.wakeCheckpointer()
}

// ticker wakes the committer when the current file has aged.
func (j *Journal) ticker() {
	if j.checkpointEvery <= 0 {
		return
	}
	t := time.NewTicker(j.checkpointEvery / 4)
	defer t.Stop()
	for {
		select {
		case <-j.committed:
			return
		case <-t.C:
			j.mu.Lock()
			if j.rotateDue() {
				j.work.Signal()
			}
			j.mu.Unlock()
		}
	}
}

// checkpointLoop checkpoints each old generation's logs, then removes its
// file. Generations are handled in order, so the files left are always the
// newest ones.
func (j *Journal) checkpointLoop() {
	for {
		j.mu.Lock()
		var g *generation
		if len(j.pending) > 0 {
			g, j.pending = j.pending[0], j.pending[1:]
		}
		last := g == nil && j.final
		j.mu.Unlock()
		if last {
			return
		}
		if g == nil {
			<-j.ckptWake
			continue
		}
		err := j.checkpoint(g)
		var retry *retryError
		if errors.As(err, &retry) && !j.isFinal() && j.err() == nil {
			// The store's value files could not be written (a full disk):
			// the generation stays, its records replayable, and is tried
			// again; the journal goes on meanwhile.
			slog.Warn("journal checkpoint: value files not written; trying again", "err", retry.err)
			j.mu.Lock()
			j.pending = append([]*generation{g}, j.pending...)
			j.mu.Unlock()
			time.Sleep(checkpointRetry)
			continue
		}
		if err != nil {
			j.failCheckpoint(err)
		}
	}
}

// failCheckpoint closes the journal to appends (EIO) after a checkpoint
// failed: a log's sync or seal write that failed leaves the page cache
// saying nothing sure about the disk, so only the journal's files, which
// stay, prove what was acknowledged; the next start replays them.
func (j *Journal) failCheckpoint(err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.broken == nil {
		j.broken = abi.Errorf(syscall.EIO, "append", "a checkpoint of the write-ahead journal failed, nothing more is recorded until the server restarts: %s", abi.ErrnoName(abi.Errno(err)))
		slog.Error("journal checkpoint failed", "err", err)
	}
	j.wakeWaiters()
}

// Err is why the journal takes no more appends (nil while it takes them).
// Its files then stay for the next start, which replays them into the
// logs where they are: nothing may move a session meanwhile.
func (j *Journal) Err() error { return j.err() }

// wakeWaiters wakes the appenders waiting for the next batch, so that
// they see the journal broken; those waiting for the batch in flight are
// woken when it ends. Caller holds j.mu.
func (j *Journal) wakeWaiters() {
	close(j.nextDone)
	j.nextDone = make(chan struct{})
}

// retryError is a checkpoint failure that a later try may not meet.
type retryError struct{ err error }

func (e *retryError) Error() string { return e.err.Error() }

// checkpointRetry is how long a checkpoint that could not write the value
// files waits before it tries again.
const checkpointRetry = time.Second

func (j *Journal) isFinal() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.final
}

// checkpointParallel bounds the logs synced at once: the disk overlaps
// concurrent syncs of different files, up to a point.
const checkpointParallel = 8

func (j *Journal) checkpoint(g *generation) error {
	if err := j.wait(g.after); err != nil {
		return err
	}
	if err := j.gateStep(); err != nil {
		return err
	}
	errs := make(chan error, len(g.dirty))
	sem := make(chan struct{}, checkpointParallel)
	for l := range g.dirty {
		sem <- struct{}{}
		go func() { errs <- l.checkpoint(); <-sem }()
	}
	var first error
	for range g.dirty {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return first // the file stays: the next start replays it
	}
	if err := j.gateStep(); err != nil {
		return err
	}
	if err := j.syncValues(g.values); err != nil {
		return &retryError{err}
	}
	j.mark("values written")
	g.f.Close()
	if err := j.gateStep(); err != nil {
		return err // the file stays: the next writer replays it, fenced
	}
	if err := j.root.Remove(path.Join(j.dir, journalName(g.gen))); err != nil {
		return err
	}
	j.mark("journal file removed")
	if err := j.root.SyncDir(j.dir); err != nil {
		return err
	}
	j.mu.Lock()
	j.live = g.gen + 1
	j.stats.Checkpoints++
	j.mu.Unlock()
	return nil
}

// checkpoint makes the durable bytes durable in the log file too and seals
// them, so that the journal no longer needs to hold them. The log's lock
// is held only to read what to seal: appends go on meanwhile.
//
// A log found unprovable while open is sealed too: the record vouches
// only for what the journal acknowledged, so the damage stays visible
// against it once the journal's file is gone. (Skipping it let the
// checkpoint drop acknowledged appends that nothing else remembered: a cut
// of exactly the unsealed lines then verified clean.)
//
// A log closed before its seal vouched for all its durable bytes (its
// close-time checkpoint failed) fails every checkpoint: the journal's
// files that hold those bytes are their only proof and must stay.
func (l *Log) checkpoint() error {
	l.mu.Lock()
	if l.closed || l.seal == nil {
		err := l.unsealed
		l.mu.Unlock()
		return err
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
	l.j.mark("log synced")
	if err := l.j.gateStep(); err != nil {
		return err
	}
	r.seq = l.seq + 1
	if err := writeRecord(l.seal, r, l.at.Key); err != nil {
		return osError("checkpoint", l.sealName(), err)
	}
	l.seq, l.sealDone, l.sealedLen = r.seq, true, r.length
	l.j.mark("log sealed")
	return nil
}

// closeJournaled stops new appends, waits until the journal holds all of
// l, checkpoints it and, when the journal may still hold records of it,
// records durably that it is retired (the log may now move or go away).
// Caller then closes the files.
func (l *Log) closeJournaled() error {
	j := l.j
	l.appendMu.Lock() // an append in flight is queued first
	j.mu.Lock()
	l.jclosed = true
	seq, gen := l.lastSeq, l.lastGen
	j.mu.Unlock()
	l.appendMu.Unlock()
	err := j.wait(seq)
	if err == nil {
		err = l.checkpoint()
	}
	if err != nil {
		j.failCheckpoint(err) // as a checkpoint's failure: its records stay replayable
		return err
	}
	if seq == 0 || !j.holds(gen) {
		return nil
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
