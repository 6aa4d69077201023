package sealedlog

import (
	"errors"
	"log/slog"
	"os"
	"path"
	"sync"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
)

// Journal is the store-wide write-ahead journal (SPEC 6 allows one, as a
// filesystem keeps its own). Every append to a journaled log becomes a
// record in it; one committer writes everything queued at that moment, from
// every session, as one batch and makes it durable with one fdatasync (group
// commit across sessions: before it, each append cost two syncs of its own
// log and seal, and sends of 16 sessions did not overlap).
//
// The seals lag the logs until a checkpoint: when the journal file grows
// past rotateAt or has aged past checkpointEvery, the committer starts a
// new file, and the checkpointer syncs every log the old file touched,
// seals it, writes the value files it changed (jvalue.go), and removes
// the old file. A log closed earlier (evicted, archived, the server
// stopping) was checkpointed by its Close, which also records that it is
// retired, so that a log that then moves or goes away is not missed at
// replay.
//
// Order of an append (jlog.go): check the log is provable; if it has no
// intent record in the current file, queue one and wait until it is
// durable; reserve room in the journal (written ahead, so that a full disk
// refuses the append before anything is written, not after it was
// acknowledged); write the bytes at the log's end, where readers see them;
// queue the record. A send then waits for the commit; a write through the
// mount does not (its fsync or close does). Log bytes past a log's seal
// and past the journal's durable records thus exist only in a log with a
// durable intent, which is what replay (RecoverJournal) relies on to tell
// a crash (cut them) from damage.
//
// An I/O error on the journal is fatal to it: it refuses every later
// append (EIO), as a database stops when a sync fails, since the page
// cache may no longer say what is on disk. The next start replays what
// was durable.
type Journal struct {
	root *storefs.Root
	dir  string // store-relative directory of the journal files

	mu   sync.Mutex
	work *sync.Cond // the committer waits here for queued units
	// Appenders wait for their unit on one of two channels: flightDone
	// is closed when the batch being written (units up to flight) is
	// durable, nextDone when the batch after it is. A commit then wakes
	// only the waiters it satisfied: a broadcast also woke every appender
	// whose unit was queued during the sync, to sleep again.
	flight     uint64
	flightDone chan struct{}
	nextDone   chan struct{}
	queue      []*jrec
	queued     int64  // journal room reserved by queued records
	seq        uint64 // number of the last unit queued
	durable    uint64 // every unit up to this one is durable
	want       uint64 // the newest unit someone waits for
	committing bool   // a batch is being written (by the committer or a waiter)
	// lazySince is when the oldest queued unit was queued (zero: none);
	// lazyTimer wakes the committer commitDelay after it (one timer,
	// armed while lazyArmed: one per batch was a timer and a wakeup of
	// the committer for nothing a second after every batch).
	lazySince time.Time
	lazyTimer *time.Timer
	lazyArmed bool
	buf       []byte // the committer's batch, reused
	broken    error
	closing   bool
	final     bool   // Close has left the last generation: the checkpointer may leave
	gen       uint64 // current generation (file)
	f         *os.File
	end       int64 // where the next batch goes in f
	alloc     int64 // f's room is reserved up to here
	batchNum  uint64
	started   time.Time               // when the current file got its first batch
	dirty     map[*Log]struct{}       // logs with durable records in the current generation
	intent    map[*Log]struct{}       // logs with an intent record in the current generation
	values    map[string]*valueChange // value files changed in the current generation
	live      uint64                  // oldest generation whose file still exists

	rotateAt        int64
	checkpointEvery time.Duration
	pending         []*generation // left by the committer, for the checkpointer
	ckptWake        chan struct{} // a generation was left, or the journal closes
	committed       chan struct{} // closed when the committer has left
	stopped         chan struct{} // closed when the checkpointer has left too
	stats           JournalStats
}

// generation is a journal file that the committer left, waiting for its
// logs' checkpoint.
type generation struct {
	gen    uint64
	f      *os.File
	dirty  map[*Log]struct{}
	values map[string]*valueChange
	after  uint64 // the last unit queued when it was left: durable before it goes
}

// JournalStats counts what the journal did (tests and benchmarks read it).
type JournalStats struct {
	Batches, Units, Syncs, Checkpoints uint64
}

// JournalConfig tunes when the journal is checkpointed.
type JournalConfig struct {
	RotateAt        int64         // bytes; 0: DefaultRotateAt
	CheckpointEvery time.Duration // 0: DefaultCheckpointEvery; <0: only by size
}

// Checkpoint defaults. 64 MiB bounds replay at start to well under a
// second; a checkpoint syncs each dirty log twice (data, seal), so it
// should be rare next to the journal's own syncs: at 16 busy sessions a
// checkpoint is 64 syncs, spread over DefaultCheckpointEvery of sends.
const (
	DefaultRotateAt        = 64 << 20
	DefaultCheckpointEvery = 30 * time.Second
)

// Units nobody waits for are committed once they have waited commitDelay
// or take lazyMax of room, whichever comes first: how much a crash may
// take of writes that were never synced (SPEC 6 allows it), and the
// memory the queue holds for them.
const (
	commitDelay = time.Second
	lazyMax     = 4 << 20
)

// Room reserved ahead (zeros written: reserve): the journal in steps of
// journalReserveStep, a log in steps of logReserveStep (a reservation is a
// syscall; these make it one per many appends).
const (
	journalReserveStep = 1 << 20
	logReserveStep     = 64 << 10
)

// OpenJournal recovers the journal files in dir (RecoverJournal: a damaged
// journal is refused, and nothing is changed; a log that cannot be
// recovered has its records kept aside), then starts a new one.
func OpenJournal(root *storefs.Root, dir string, locate Locate, cfg JournalConfig) (*Journal, error) {
	rec, err := RecoverJournal(root, dir, locate, false)
	if err != nil {
		return nil, err
	}
	if len(rec.Problems) > 0 {
		return nil, &JournalDamage{Problems: rec.Problems}
	}
	for _, p := range rec.Held {
		slog.Warn("journal: a log could not be recovered; its appends are kept aside and its session is unprovable", "log", p.Path, "what", p.What)
	}
	j := &Journal{
		root: root, dir: dir,
		gen: rec.NextGen, live: rec.NextGen,
		dirty:           map[*Log]struct{}{},
		values:          map[string]*valueChange{},
		rotateAt:        cfg.RotateAt,
		checkpointEvery: cfg.CheckpointEvery,
		ckptWake:        make(chan struct{}, 1),
		committed:       make(chan struct{}),
		stopped:         make(chan struct{}),
	}
	if j.rotateAt <= 0 {
		j.rotateAt = DefaultRotateAt
	}
	if j.checkpointEvery == 0 {
		j.checkpointEvery = DefaultCheckpointEvery
	}
	j.work = sync.NewCond(&j.mu)
	j.flightDone, j.nextDone = make(chan struct{}), make(chan struct{})
	close(j.flightDone)
	j.lazyTimer = time.AfterFunc(time.Hour, j.lazyTick)
	j.lazyTimer.Stop()
	if j.f, err = j.create(j.gen); err != nil {
		return nil, err
	}
	go func() { j.commitLoop(); close(j.committed) }()
	go func() { j.checkpointLoop(); close(j.stopped) }()
	go j.ticker()
	return j, nil
}

// JournalDamage is why a journal cannot be replayed as it is: each
// problem, and the advice. The store is left as it was.
type JournalDamage struct{ Problems []Problem }

func (d *JournalDamage) Error() string {
	s := "the write-ahead journal is damaged; nothing was replayed (run ctxfs fsck --repair):"
	for _, p := range d.Problems {
		s += "\n  " + p.Path + ": " + p.What
	}
	return s
}

// create makes the file of generation gen and syncs its directory, so that
// batches acknowledged from it are found after a crash.
func (j *Journal) create(gen uint64) (*os.File, error) {
	rel := path.Join(j.dir, journalName(gen))
	f, err := j.root.OpenFile(rel, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, osError("journal", j.root.Show(rel), err)
	}
	if err := j.root.SyncDir(j.dir); err != nil {
		f.Close()
		j.root.Remove(rel)
		return nil, osError("journal", j.root.Show(j.dir), err)
	}
	return f, nil
}

// enqueueAppends writes each record's data at the end of its log and
// queues the records as one unit (all or none of them become durable),
// returning its number. Under j.mu, so that the order of offsets in a log
// is the order of its records in the journal. A log's first append in a
// journal generation first waits for its intent record (jlog.go).
func (j *Journal) enqueueAppends(recs []*jrec) (uint64, error) {
	for {
		j.mu.Lock()
		wait, err := j.intents(recs)
		if err != nil {
			j.mu.Unlock()
			return 0, err
		}
		if wait == 0 {
			break // holding j.mu
		}
		j.mu.Unlock()
		if err := j.wait(wait); err != nil {
			return 0, err
		}
	}
	defer j.mu.Unlock()
	if err := j.reserve(unitRoom(recs)); err != nil {
		return 0, err
	}
	for i, r := range recs {
		off, err := r.log.writeEnd(r.data)
		if err != nil {
			for _, w := range recs[:i] {
				w.log.takeBack(w.off) // the unit is all or nothing
			}
			return 0, err
		}
		r.off = off
	}
	seq := j.push(recs)
	for _, r := range recs {
		r.log.lastSeq, r.log.lastGen = seq, j.gen
	}
	return seq, nil
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
	return nil
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
// blocks the file already has, and its fdatasync flushes data alone. Into
// fallocated room past the file's end, every batch changed the size and
// turned an unwritten extent into a written one, so every fdatasync also
// wrote the inode (ext4 without a journal, the benchmark machine's root)
// or committed the filesystem's journal (with one): on the benchmark's
// ext4 that made a sync about 1.4 times slower and cost twice the CPU
// (140-170 µs of system time against 75-100). The zeros' own allocation
// is made durable by the first batch's sync in them. (Without a journal,
// ext4's fdatasync still writes the inode when only its mtime moved, and
// with the kernel's multigrain timestamps it moves at every batch: the
// logs' fstat witnesses make each log write take a fine-grained time,
// which every other file's next change then takes too. Measured and
// left as is: docs/benchmarks.md, "Which filesystem holds the store".) Replay reads a zero header past the last
// batch as the end (the newest file may end so; an older one is cut to its
// last batch when the committer leaves it: rotate).
func (j *Journal) reserve(n int64) error {
	want := j.end + j.queued + n
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
// were two wake-ups per commit on a send's path (with the other cuts of
// that day, a send's server CPU at one client fell by about 15%).
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
		for j.committing || !j.commitDue() && !j.rotateDue() && !(j.closing && len(j.queue) == 0) {
			j.work.Wait()
		}
		if len(j.queue) == 0 && j.closing {
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
	if j.rotateDue() && j.broken == nil {
		j.rotate()
	}
	batch, last := j.queue, j.seq
	j.queue, j.queued, j.lazySince = nil, 0, time.Time{}
	if len(batch) == 0 {
		return
	}
	last = batch[len(batch)-1].last
	f, off, gen, num := j.f, j.end, j.gen, j.batchNum
	var buf []byte
	if j.broken == nil {
		j.buf = encodeBatch(j.buf, gen, num, batch)
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
	if buf != nil {
		err = j.write(f, buf, off)
	}
	if err == nil {
		err = advance(batch)
	}
	j.mu.Lock()
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
	j.mu.Lock()
	j.stats.Syncs++
	j.mu.Unlock()
	return fdatasync(f)
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
// asks for an intent in the new file. Caller (the committer) holds j.mu;
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
	f, err := j.create(j.gen + 1)
	if err != nil {
		slog.Warn("journal: cannot start a new file; the current one keeps growing", "err", err)
		return
	}
	old := &generation{gen: j.gen, f: j.f, dirty: j.dirty, values: j.values}
	j.values = map[string]*valueChange{}
	j.gen++
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
		if errors.As(err, &retry) && !j.isFinal() {
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
			j.mu.Lock()
			if j.broken == nil {
				j.broken = abi.Errorf(syscall.EIO, "append", "a checkpoint of the write-ahead journal failed, nothing more is recorded until the server restarts: %s", abi.ErrnoName(abi.Errno(err)))
				slog.Error("journal checkpoint failed", "err", err)
			}
			j.wakeWaiters()
			j.mu.Unlock()
		}
	}
}

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
	if err := j.syncValues(g.values); err != nil {
		return &retryError{err}
	}
	g.f.Close()
	if err := j.root.Remove(path.Join(j.dir, journalName(g.gen))); err != nil {
		return err
	}
	if err := j.root.SyncDir(j.dir); err != nil {
		return err
	}
	j.mu.Lock()
	j.live = g.gen + 1
	j.stats.Checkpoints++
	j.mu.Unlock()
	return nil
}

// Sync waits until everything queued so far is durable.
func (j *Journal) Sync() error {
	j.mu.Lock()
	seq := j.seq
	j.mu.Unlock()
	return j.wait(seq)
}

// Stats returns what the journal did so far.
func (j *Journal) Stats() JournalStats {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.stats
}

// Close commits what is queued, checkpoints every log still dirty, and
// removes the journal's files: a clean stop leaves no journal to replay.
// Logs still open keep their place but may not be appended to again.
func (j *Journal) Close() error {
	j.mu.Lock()
	already := j.closing
	j.closing = true
	j.mu.Unlock()
	if already {
		<-j.stopped
		return j.err()
	}
	j.stop(true)
	return j.err()
}

// stop lets the committer commit what is queued and leave, then the
// checkpointer finish; with checkpointLast, the current generation is
// checkpointed too (a clean stop).
func (j *Journal) stop(checkpointLast bool) {
	j.mu.Lock()
	j.closing = true
	j.work.Signal()
	j.mu.Unlock()
	<-j.committed
	j.lazyTimer.Stop()
	j.mu.Lock()
	if checkpointLast && j.broken == nil {
		j.leave(&generation{gen: j.gen, f: j.f, dirty: j.dirty, values: j.values})
		j.dirty, j.values = map[*Log]struct{}{}, map[string]*valueChange{}
	}
	j.final = true
	j.wakeCheckpointer()
	j.mu.Unlock()
	<-j.stopped
}

// wakeCheckpointer tells the checkpointer to look again (never blocks).
func (j *Journal) wakeCheckpointer() {
	select {
	case j.ckptWake <- struct{}{}:
	default:
	}
}

func (j *Journal) err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.broken
}
