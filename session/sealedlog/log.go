// Package sealedlog owns one append-only JSONL log of a session
// (messages.jsonl or events.jsonl) and its seal, the side file that proves
// the log's history: the exact length and the SHA-256 of everything ever
// acknowledged, persisted crash-safely in two alternating slots.
//
// It validates every appended line, appends and syncs in one place
// (Log.Append, with group commit), and verifies in one place (examine, used
// by Open, Verify and Repair). It never rewrites history: the only bytes it
// ever removes are those of an append that a crash or an I/O error
// interrupted before it was acknowledged. A log that does not match its seal
// is unprovable, and a Log refuses to append to it (EIO).
//
// A log opened with a Journal (Place.Journal, as the engine opens every
// session log) appends through the store-wide write-ahead journal
// (journal.go, jlog.go): one fdatasync for every append waiting, from every
// log, and seals written at checkpoints. Without one, each log is durable
// on its own.
//
// Durability of a log without a journal, in order, for one batch at
// committed length L:
//
//  1. seal: intent record {length L+N, uncommitted} in the other slot; fdatasync.
//  2. log: pwrite the batch at L; fdatasync. Callers are acknowledged here.
//  3. seal (at Close, or the next batch's intent): a later record vouching for L+N.
//
// A crash between 1 and 2 leaves an uncommitted intent and at most N bytes
// past L; examine recognises exactly that and nothing more as a torn append.
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
	"github.com/ctxfs/ctxfs/internal/storefs"
)

// Place is where a log and its seal are in the store, and what the seal
// binds them to.
type Place struct {
	Root *storefs.Root
	// Journal, when set, takes the log's appends (group commit across
	// logs; see Journal). Without it every append syncs the log and its
	// seal itself (an intent record, then the data).
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

	length   atomic.Int64 // committed length; read without locks by Size and ReadAt
	syncs    atomic.Int64 // batches made durable; tests check that group commit happened
	verifies atomic.Int64 // full re-reads by Check; tests check that Check stays cheap

	memMu  sync.RWMutex
	memBuf []byte // the content of a memory log

	fdMu sync.RWMutex // guards f against replacement (Check) and Close while ReadAt uses it
	f    *os.File     // the log, read-write, written with pwrite only

	order uint64 // lock order among logs (lockPair)

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
	closed      bool
	writeData   func(f *os.File, b []byte, off int64) (int, error) // tests inject short writes
	afterSeal   func()                                             // tests snapshot crash states

	qmu        sync.Mutex // guards the group-commit queue
	queue      []*pendingAppend
	committing bool

	// A journaled log (jlog.go).
	j          *Journal
	durableLen int64      // what the journal (or, without one, the file) holds durably; guarded by mu
	hasher     hash.Hash  // running hash of log[0:durableLen]; guarded by mu
	sealMu     sync.Mutex // serialises seal writes (checkpoints, Close) without holding mu
	sealedLen  int64      // what the seal vouches for; guarded by sealMu
	// guarded by j.mu:
	lastSeq   uint64 // the journal unit of l's last append
	lastGen   uint64 // and the generation it went to
	intentGen uint64 // the generation holding l's intent record (0: none yet)
	intentSeq uint64 // the unit of that intent
	jclosed   bool   // Close began: no more appends
}

// Create makes a new empty log and its seal, durably: both files and the
// directories they are in are synced before it returns. EEXIST when either
// exists. Both get own's file mode and owner (see storefs.Fchown).
func Create(at Place, own storefs.Owner) (*Log, error) {
	f, err := createFile(at.Root, at.Log, own)
	if err != nil {
		return nil, err
	}
	seal, err := createFile(at.Root, at.Seal, own)
	if err != nil {
		f.Close()
		at.Root.Remove(at.Log)
		return nil, err
	}
	l := newFileLog(at, f)
	l.seal = seal
	l.adopt(newRecord(1, 0, true, sha256.New(), at.Bind))
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

// logOrder numbers file logs as they are made: the order in which a pair
// of them is locked (lockPair).
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
	if l.j != nil {
		l.hasher, _ = resumeHash(r.state) // decodeRecord checked that it resumes
	}
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
		// All of the last append reached the log: seal it as committed now, so
		// that damage done while we are down is never mistaken for a crash.
		l.adopt(ex.base)
		if err := l.commitSeal(); err != nil {
			return nil, osError("open", l.sealName(), err)
		}
	default:
		l.adopt(ex.base)
	}
	l.restamp()
	return l, nil
}

// NewMemory is a log kept only in memory (temp sessions): no files, no
// seal, never unprovable.
func NewMemory() *Log {
	return &Log{mem: true}
}

// Size is the committed length: everything Append acknowledged. For a log
// that was unprovable when opened it is the length found, so all of it can
// still be read.
func (l *Log) Size() int64 { return l.length.Load() }

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
		l.memMu.RLock()
		defer l.memMu.RUnlock()
		return copy(p, l.memBuf[off:]), nil
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

// Close seals the committed length with a committed record, so the next
// Open can tell damage from a crash, then closes both files. A log that was
// unprovable when opened is left exactly as it was. Safe to call twice.
func (l *Log) Close() error {
	if l.mem {
		return nil
	}
	var jerr error
	if l.j != nil && l.seal != nil {
		jerr = l.closeJournaled()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sealMu.Lock() // a checkpoint in flight finishes with the files open
	defer l.sealMu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	err := jerr
	if l.seal != nil && err == nil {
		err = l.commitSeal()
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

// commitSeal writes a committed record for the in-memory truth unless the
// latest record already is one. It vouches only for acknowledged bytes, so
// it is right even when the file has been damaged meanwhile.
func (l *Log) commitSeal() error {
	if l.sealDone {
		return nil
	}
	r := l.record(l.seq+1, true)
	if err := writeRecord(l.seal, r, l.at.Key); err != nil {
		return err
	}
	l.seq, l.sealDone = r.seq, true
	return nil
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
