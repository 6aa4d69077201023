// Package sealedlog owns one append-only JSONL log of a session
// (messages.jsonl or events.jsonl), its seal, the side file that proves
// the log's history (the exact length and the SHA-256 of everything ever
// acknowledged, in two alternating slots), and the store-wide write-ahead
// journal every append goes through.
//
// It validates every appended line, appends in one place (Log.Append,
// Log.Write, AppendPair: the journal's enqueueAppends), makes appends
// durable in one place (the journal's committer: one fdatasync for every
// append waiting, from every log), seals in one place (a checkpoint:
// sealAt), and verifies in one place (examine, used by Open, Verify and
// Repair). It never rewrites history: the only bytes it ever removes are
// those of an append that a crash or an I/O error interrupted before it
// was acknowledged. A log that does not match its seal (and the journal)
// is unprovable, and a Log refuses to append to it (EIO). It must never
// sync a log for an append of its own, nor write a seal outside a
// checkpoint, the creation of a log, or the recovery of one.
//
// Files: the log (log.go, log_append.go, log_check.go, log_verify.go,
// log_memory.go); its seal (seal.go: the record format; seal_key.go: the
// store's key); the journal (journal.go: the type and its life;
// journal_write.go: queue, batches, group commit; journal_checkpoint.go:
// rotation, checkpoints, a log's retirement; journal_format.go: the
// on-disk format; journal_value.go: single-value files; journal_replay.go:
// recovery at start and fsck's plan); held.go: the records of a log a
// start could not recover, kept aside.
//
// Seals of stores from before the journal may hold a per-log intent
// record (an uncommitted record, written before an append's bytes): Open,
// Verify and Repair still judge such a seal (a crash may have torn the
// append it announced), but nothing writes one any more.
package sealedlog

import (
	"crypto/sha256"
	"errors"
	"hash"
	"io"
	"os"
	"path"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/internal/storefs"
)

// Place is where a log and its seal are in the store, and what the seal
// binds them to.
type Place struct {
	Root *storefs.Root
	// Journal takes the log's appends (group commit across logs; see
	// Journal). A log opened without one is read, verified and closed,
	// and refuses appends.
	Journal *Journal
	Log     string // the log, relative to the store
	Seal    string // its seal, relative to the store
	// Bind is what every seal record of this log carries and must carry:
	// the digest of the session's identity and the log's name (Binding).
	// A log and seal moved to another session, or swapped with the other
	// log of the same session, no longer match it.
	Bind [32]byte
	// Key is the store's seal key: every record is written with its MAC
	// under it and must verify under it (Key).
	Key *Key
}

// Binding is the value a seal binds its log to: the session's identity
// (a random id drawn at creation and the session's place then, kept in the
// session) and the log's file name.
func Binding(identity []byte, file string) [32]byte {
	h := sha256.New()
	h.Write([]byte("ctxfs seal binding v1\x00"))
	h.Write(identity)
	h.Write([]byte{0})
	h.Write([]byte(file))
	return [32]byte(h.Sum(nil))
}

// Log is one append-only log and its seal, or a log kept only in memory.
type Log struct {
	at  Place
	mem bool

	length   atomic.Int64  // what the file holds and readers see; read without locks by Size and ReadAt
	changes  atomic.Uint64 // times the bytes below length may have changed (Changes)
	verifies atomic.Int64  // full re-reads by Check; tests check that Check stays cheap

	memMu  sync.RWMutex
	memBuf []byte // the content of a memory log

	fdMu sync.RWMutex // guards f against replacement (Check) and Close while ReadAt uses it
	f    *os.File     // the log, read-write, written with pwrite only

	mu          sync.Mutex // held by the committer, Check and Close: all state below
	seal        *os.File   // nil for a log that was unprovable when opened
	seq         uint64     // seq of the latest seal record
	sealDone    bool       // latest record is committed
	state       []byte     // marshalled SHA-256 state of log[0:length]
	digest      [sha256.Size]byte
	stamp       fileStamp // what the log looked like after our last write or verify
	sealID      fileID    // the seal file we write to; its name must keep holding it
	bad         error     // sticky: once unprovable, always unprovable
	pathChecked time.Time // when Check last looked at the names (quickCheck)
	sealStamp   fileStamp // the seal as Check last saw it
	unsealed    error     // set by Close when the seal lags the durable bytes (checkpoint)
	closed      bool
	writeData   func(f *os.File, b []byte, off int64) (int, error) // tests inject short writes

	// The journal's share (log_append.go, journal_checkpoint.go).
	j *Journal // nil: the log is not appended to
	// appendMu is held by an append from its write at the log's end until
	// its record is queued (journal_write.go), so that the order of
	// offsets in a log is the order of its records in the journal;
	// appends to other logs write meanwhile. order is its place among
	// the logs' append locks.
	appendMu   sync.Mutex
	order      uint64
	durableLen int64      // what the journal holds durably; guarded by mu
	hasher     hash.Hash  // running hash of log[0:durableLen]; guarded by mu
	sealMu     sync.Mutex // serialises seal writes (checkpoints, Close) without holding mu
	sealedLen  int64      // what the seal vouches for; guarded by sealMu
	// guarded by j.mu:
	lastSeq   uint64 // the journal unit of l's last append
	lastGen   uint64 // and the generation it went to
	intentGen uint64 // the generation holding l's intent record (0: none yet)
	intentSeq uint64 // the unit of that intent
	jclosed   bool   // Close began: no more appends (set under appendMu too)

	charge quota.Charge // who pays for its bytes (SetCharge); nil: nobody
}

// Create makes a new empty log and its seal, durably: both files and the
// directories they are in are synced before it returns. EEXIST when either
// exists. Both get own's file mode and owner (see storefs.Fchown).
func Create(at Place, own storefs.Owner) (*Log, error) { return CreateWith(at, own, nil) }

// CreateWith is Create for a log that starts with content (whole lines,
// which it judges as Validate does: EINVAL, nothing made), its seal
// vouching for them: a session made whole elsewhere and renamed into
// place (ctx agent import) has its history in one durable step.
func CreateWith(at Place, own storefs.Owner, content []byte) (*Log, error) {
	if len(content) > 0 {
		if err := Validate(content); err != nil {
			return nil, err
		}
	}
	f, err := createFile(at.Root, at.Log, own)
	if err != nil {
		return nil, err
	}
	if _, err := f.WriteAt(content, 0); err != nil {
		f.Close()
		at.Root.Remove(at.Log)
		return nil, osError("create", at.show(at.Log), err)
	}
	seal, err := createFile(at.Root, at.Seal, own)
	if err != nil {
		f.Close()
		at.Root.Remove(at.Log)
		return nil, err
	}
	l := newFileLog(at, f)
	l.seal = seal
	h := sha256.New()
	h.Write(content)
	l.adopt(newRecord(1, int64(len(content)), true, h, at.Bind))
	if err := l.createDurably(); err != nil {
		f.Close()
		seal.Close()
		at.Root.Remove(at.Log)
		at.Root.Remove(at.Seal)
		return nil, err
	}
	return l, nil
}

// createDurably writes the first record and syncs both files and their
// directories, so that after a crash either both names exist with a valid
// seal or Create did not return success.
func (l *Log) createDurably() error {
	r := l.record(l.seq, true)
	if err := writeRecord(l.seal, r, l.at.Key); err != nil {
		return osError("create", l.sealName(), err)
	}
	for _, f := range []*os.File{l.seal, l.f} {
		if err := f.Sync(); err != nil {
			return osError("create", f.Name(), err)
		}
	}
	dirs := []string{path.Dir(l.at.Log)}
	if d := path.Dir(l.at.Seal); d != dirs[0] {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		if err := l.at.Root.SyncDir(d); err != nil {
			return osError("create", l.at.Root.Show(d), err)
		}
	}
	l.restamp()
	return nil
}

// createFile creates one file exclusively with exactly the owner and mode
// asked for.
func createFile(root *storefs.Root, rel string, own storefs.Owner) (*os.File, error) {
	f, err := root.OpenFile(rel, os.O_RDWR|os.O_CREATE|os.O_EXCL, own.FileMode)
	if err != nil {
		return nil, osError("create", root.Show(rel), err)
	}
	if err := storefs.Fchown(f, own); err != nil {
		f.Close()
		root.Remove(rel)
		return nil, osError("create", root.Show(rel), err)
	}
	return f, nil
}

func newFileLog(at Place, f *os.File) *Log {
	return &Log{at: at, f: f, j: at.Journal, writeData: (*os.File).WriteAt, order: logOrder.Add(1)}
}

// logOrder numbers the logs opened, the order a unit takes their append
// locks in (lockLogs).
var logOrder atomic.Uint64

// name and sealName are how the log and its seal are named in errors.
func (l *Log) name() string     { return l.at.show(l.at.Log) }
func (l *Log) sealName() string { return l.at.show(l.at.Seal) }

// show names rel; a memory log has no store and is named as is.
func (at Place) show(rel string) string {
	if at.Root == nil {
		return rel
	}
	return at.Root.Show(rel)
}

// record is a record of the in-memory truth with the given seq: what the
// log file holds.
func (l *Log) record(seq uint64, committed bool) *record {
	return &record{seq: seq, length: l.durableLen, committed: committed, digest: l.digest, state: l.state, bind: l.at.Bind}
}

// adopt makes r the in-memory truth: the committed length and hash state.
func (l *Log) adopt(r *record) {
	l.seq, l.sealDone = r.seq, r.committed
	l.state, l.digest = r.state, r.digest
	l.length.Store(r.length)
	l.durableLen = r.length
	if r.committed {
		l.sealedLen = r.length
	}
	l.hasher, _ = resumeHash(r.state) // decodeRecord checked that it resumes
}

// Open opens an existing log for appending after verifying it fully, and
// finishes an append a crash interrupted (cutting its unacknowledged bytes).
// An unprovable log still opens, with Check reporting why and nothing ever
// written to it; so does a missing log (history that was there is gone),
// which reads as empty. The error is for I/O trouble only.
func Open(at Place) (*Log, error) {
	f, err := at.Root.OpenFile(at.Log, os.O_RDWR, 0)
	switch {
	case errors.Is(err, os.ErrNotExist), storefs.IsUnsafe(err):
		return unprovableLog(at, what(err, "log file is missing")), nil
	case err != nil:
		return nil, osError("open", at.Root.Show(at.Log), err)
	}
	seal, serr := at.Root.OpenFile(at.Seal, os.O_RDWR, 0)
	switch {
	case errors.Is(serr, os.ErrNotExist), storefs.IsUnsafe(serr):
		seal = nil // examine reports the missing seal
	case serr != nil:
		f.Close()
		return nil, osError("open", at.Root.Show(at.Seal), serr)
	}
	l, err := openExamined(at, f, seal)
	if err == nil && storefs.IsUnsafe(serr) {
		l.bad = unprovable(l.name(), "seal: "+storefs.Words(serr)) // say what is there instead
	}
	if err != nil {
		f.Close()
		if seal != nil {
			seal.Close()
		}
		return nil, err
	}
	return l, nil
}

// what is the words for a log that cannot be opened: what an unsafe path
// holds, or missing.
func what(err error, missing string) string {
	if storefs.IsUnsafe(err) {
		return storefs.Words(err)
	}
	return missing
}

// unprovableLog is a Log for a log file that is gone or is not a regular
// file: it reads as empty and refuses every append.
func unprovableLog(at Place, what string) *Log {
	l := &Log{at: at}
	l.bad = unprovable(l.name(), what)
	return l
}

// openExamined verifies the open files and builds the Log: provable, after
// finishing any interrupted append; or unprovable, read-only in effect.
func openExamined(at Place, f, seal *os.File) (*Log, error) {
	ex, err := examine(at, f, seal, nil)
	if err != nil {
		return nil, err
	}
	l := newFileLog(at, f)
	if !ex.provable() {
		l.bad = unprovable(l.name(), ex.summary())
		l.length.Store(ex.size) // so a person can still read all of it
		if seal != nil {
			seal.Close()
		}
		l.restamp()
		return l, nil
	}
	l.seal = seal
	switch {
	case ex.torn:
		if err := finishTorn(f, seal, ex, at.Key); err != nil {
			return nil, osError("open", l.name(), err)
		}
		l.adopt(ex.base)
		l.seq, l.sealDone = ex.seal.latest.seq+1, true
	case !ex.base.committed:
		// All of the last append of a server before the journal reached
		// the log: seal it as committed now, so that damage done while we
		// are down is never mistaken for a crash.
		l.adopt(ex.base)
		if err := l.sealAt(l.record(0, true)); err != nil {
			return nil, err
		}
	default:
		l.adopt(ex.base)
	}
	l.restamp()
	return l, nil
}

// Size is the length readers see: everything appended (a Write's lines
// before they are durable too). For a log that was unprovable when opened
// it is the length found, so all of it can still be read.
func (l *Log) Size() int64 { return l.length.Load() }

// Changes counts the times the bytes readers see below Size may have
// changed while l was open: an end taken back (the other half of a unit
// was refused: see takeBack), a file adopted in place of its own, damage
// found. Between two calls that return the same count the log only grew:
// a reader that asks Changes before Size and finds the count unchanged
// later may keep what it read below that Size (the prompt's read logs do).
func (l *Log) Changes() uint64 { return l.changes.Load() }

// ReadAt reads committed content. Reads at or past Size return io.EOF; a
// read that crosses Size is cut there and returns io.EOF with what it read.
func (l *Log) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, abi.Errorf(syscall.EINVAL, "read", "negative offset %d", off)
	}
	size := l.Size()
	if off >= size {
		return 0, io.EOF
	}
	short := off+int64(len(p)) > size
	if short {
		p = p[:size-off]
	}
	n, err := l.readAt(p, off)
	if err == nil && short {
		err = io.EOF
	}
	return n, err
}

func (l *Log) readAt(p []byte, off int64) (int, error) {
	if l.mem {
		return l.readMemory(p, off), nil
	}
	l.fdMu.RLock()
	defer l.fdMu.RUnlock()
	if l.f == nil {
		return 0, abi.Errorf(syscall.EBADF, "read", "%s: log is closed", l.name())
	}
	n, err := l.f.ReadAt(p, off)
	if err != nil && err != io.EOF {
		err = osError("read", l.name(), err)
	}
	return n, err
}

// Close checkpoints the log (its durable bytes synced and sealed, and,
// when the journal may still hold its records, a retire record: see
// closeJournaled), then closes both files. A log that was unprovable when
// opened is left exactly as it was. Safe to call twice.
//
// When the checkpoint fails, the files close all the same, but the
// journal takes no more appends and keeps every file that holds the log's
// unsealed bytes (checkpoint), so the next start replays them: the
// error is the caller's to report, and the log must not move meanwhile.
func (l *Log) Close() error {
	if l.mem {
		return nil
	}
	var err error
	if l.j != nil && l.seal != nil {
		err = l.closeJournaled()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sealMu.Lock() // a checkpoint in flight finishes with the files open
	defer l.sealMu.Unlock()
	if l.closed {
		return l.unsealed
	}
	l.closed = true
	l.unsealed = l.sealLag()
	if l.seal != nil {
		if cerr := l.seal.Close(); err == nil {
			err = cerr
		}
	}
	l.fdMu.Lock()
	if l.f != nil {
		if cerr := l.f.Close(); err == nil {
			err = cerr
		}
	}
	l.f = nil
	l.fdMu.Unlock()
	if err != nil {
		return osError("close", l.name(), err)
	}
	return nil
}

// sealLag is EIO when the seal does not vouch for every durable byte of
// a journaled log (nil when it does): what a failed close-time checkpoint
// leaves. Caller holds mu and sealMu.
func (l *Log) sealLag() error {
	if l.j == nil || l.seal == nil || l.sealDone && l.sealedLen == l.durableLen {
		return nil
	}
	return abi.Errorf(syscall.EIO, "checkpoint", "%s: closed before its seal vouched for its %d durable bytes; the journal keeps them", l.name(), l.durableLen)
}

// fileID is a file's device and inode: which file a name holds.
type fileID struct{ dev, ino uint64 }

// fileStamp is what stat says about the log file; while it is unchanged,
// nobody but us has written to the file, so Check need not re-read it.
type fileStamp struct {
	dev, ino uint64
	size     int64
	ctime    unix.Timespec
}

func stampOf(st *unix.Stat_t) fileStamp {
	return fileStamp{dev: uint64(st.Dev), ino: st.Ino, size: st.Size, ctime: st.Ctim}
}

// restampLog records the log file as it is after our own write to it.
func (l *Log) restampLog() {
	var st unix.Stat_t
	l.stamp = fileStamp{}
	if err := unix.Fstat(int(l.f.Fd()), &st); err == nil {
		l.stamp = stampOf(&st)
	}
}

// restamp records the log file as it is after our own write, and which
// inode the seal is. If fstat fails the stamp is cleared, which only costs
// the next Check a full re-verify.
func (l *Log) restamp() {
	l.restampLog()
	var st unix.Stat_t
	l.sealID = fileID{}
	if l.seal != nil && unix.Fstat(int(l.seal.Fd()), &st) == nil {
		l.sealID = fileID{uint64(st.Dev), st.Ino}
	}
}
