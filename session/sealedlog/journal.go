package sealedlog

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"sync"
	"sync/atomic"
	"time"

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
// seals it, writes the value files it changed (journal_value.go), and removes
// the old file. A log closed earlier (evicted, archived, the server
// stopping) was checkpointed by its Close, which also records that it is
// retired, so that a log that then moves or goes away is not missed at
// replay.
//
// Order of an append (log_append.go, journal_write.go): check the log is provable; if it has no
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
	// Units between admit and queueWritten (writing at their logs' ends),
	// and the journal room they hold; rotating holds new ones back while
	// a generation starts, and quiet is where both wait.
	inflight     int
	inflightRoom int64
	rotating     bool
	quiet        *sync.Cond
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
	values    map[string]*valueChange // value files changed in the current generation
	live      uint64                  // oldest generation whose file still exists

	rotateAt        int64
	checkpointEvery time.Duration
	token           uint64        // this writer's fencing token, in every batch
	gate            func() error  // JournalConfig.Gate (nil: always open)
	shut            atomic.Bool   // the gate closed, or Abandon: no seal, no removal any more
	pending         []*generation // left by the committer, for the checkpointer
	ckptWake        chan struct{} // a generation was left, or the journal closes
	committed       chan struct{} // closed when the committer has left
	stopped         chan struct{} // closed when the checkpointer has left too
	stats           JournalStats
	// instant, in tests, is called at each named instant of the protocol
	// (mark): there they take the store as a crash would leave it.
	instant func(name string)
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

// JournalConfig tunes when the journal is checkpointed, and says who
// writes it in a cluster (SPEC 19).
type JournalConfig struct {
	RotateAt        int64         // bytes; 0: DefaultRotateAt
	CheckpointEvery time.Duration // 0: DefaultCheckpointEvery; <0: only by size
	// Token is this writer host's fencing token (0: no cluster), written
	// into every batch; with one, OpenJournal fences the journal
	// (FenceJournal) before it replays, and refuses a token below the
	// fence's (ESTALE). Without one, a fenced journal is refused (ESTALE):
	// a server outside the cluster would write batches replay passes over.
	Token uint64
	// Gate says whether this host may still write (nil: always). It is
	// asked before each batch is written and again after its sync, before
	// the batch is acknowledged; before each log append is written; before
	// a checkpoint writes a seal or removes a journal file. Once it
	// returns an error, the journal is closed for good: the waiters and
	// every later append get an error wrapping EAGAIN (a batch written but
	// not acknowledged may still be durable, like a crash's). It must be
	// cheap and never block: it is asked with the journal's lock held.
	Gate func() error
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
	if err := fenceFor(root, dir, cfg.Token); err != nil {
		return nil, err
	}
	rec, err := RecoverJournal(root, dir, locate, false)
	if err != nil {
		return nil, err
	}
	if len(rec.Problems) > 0 {
		return nil, &JournalDamage{Problems: rec.Problems}
	}
	for _, p := range rec.Ignored {
		slog.Warn("journal: batches of a writer host whose lease was lost are not history", "file", p.Path, "what", p.What)
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
		token:           cfg.Token,
		gate:            cfg.Gate,
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
	j.quiet = sync.NewCond(&j.mu)
	j.flightDone, j.nextDone = make(chan struct{}), make(chan struct{})
	close(j.flightDone)
	j.lazyTimer = time.AfterFunc(time.Hour, j.lazyTick)
	j.lazyTimer.Stop()
	if j.f, j.gen, err = j.create(j.gen); err != nil {
		return nil, err
	}
	j.live = j.gen
	go func() { j.commitLoop(); close(j.committed) }()
	go func() { j.checkpointLoop(); close(j.stopped) }()
	go j.ticker()
	return j, nil
}

// mark tells a test that the protocol is at the named instant (nothing
// in production).
func (j *Journal) mark(name string) {
	if j != nil && j.instant != nil {
		j.instant(name)
	}
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
// batches acknowledged from it are found after a crash. It returns the
// generation it made: when gen's name is taken (by a writer host fenced
// off meanwhile, which went on to its next file), the next free one, up
// to createTries on.
func (j *Journal) create(gen uint64) (*os.File, uint64, error) {
	rel := path.Join(j.dir, journalName(gen))
	f, err := j.root.OpenFile(rel, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	for tries := 1; errors.Is(err, fs.ErrExist) && tries < createTries; tries++ {
		slog.Warn("journal: a file of the next generation is there already (a fenced-off writer's?); taking the one after", "file", j.root.Show(rel))
		gen++
		rel = path.Join(j.dir, journalName(gen))
		f, err = j.root.OpenFile(rel, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	}
	if err != nil {
		return nil, 0, osError("journal", j.root.Show(rel), err)
	}
	if err := j.root.SyncDir(j.dir); err != nil {
		f.Close()
		j.root.Remove(rel)
		return nil, 0, osError("journal", j.root.Show(j.dir), err)
	}
	return f, gen, nil
}

// createTries bounds the generations create passes over.
const createTries = 16

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
