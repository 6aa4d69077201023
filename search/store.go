package search

import (
	"errors"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"syscall"

	"github.com/ctxfs/ctxfs/internal/storefs"
)

// The index's storage: per session, in <home>/.search/<kind>/<owner>/<session>/,
// numbered segment files 0, 1, … each the Bloom filter of the n-grams of
// one range of messages.jsonl. Closed segments are never rewritten; only
// the last one grows, so a query after an append re-reads only the bytes
// appended since, and rewrites one file of at most 512 KiB. Nothing hooks
// the send path: the index catches up at query time. Files are root's
// (0700/0600, like .self_id), replaced atomically without a sync: after a
// crash a segment is whole or missing, and one that no longer fits its log
// is dropped and rebuilt. Which sessions are searched, who may search and
// at what pace is the engine's business; this file never opens a log.

// owner owns the index: the server's own, never the user's.
var owner = storefs.Owner{Uid: 0, Gid: 0, DirMode: 0o700, FileMode: 0o600}

// Store is where the segments of indexes are: the store's root, and how
// a session's index directory is made (with its parents).
type Store struct {
	Root     *storefs.Root
	MkdirAll func(dir string, own storefs.Owner) error // makes dir and its parents, as the engine makes its directories
}

// Log is one session's messages.jsonl opened for searching.
type Log struct {
	F     *os.File
	R     io.ReaderAt // F read at the search's pace, counted: how indexing and verifying read it (a segment's check of the 64 bytes it ends with reads F)
	Size  int64       // how much of it to read
	Ident [16]byte    // the session's identity (zero when unreadable)
	Info  os.FileInfo // F's stat when opened (nil: unknown): what tells a query that the log is as a check found it
}

// Span is a range of messages.jsonl.
type Span struct{ From, To int64 }

// MergeSpans joins adjacent ranges, so that one scan reads them.
func MergeSpans(in []Span) []Span {
	var out []Span
	for _, s := range in {
		if n := len(out); n > 0 && out[n-1].To == s.From {
			out[n-1].To = s.To
			continue
		}
		out = append(out, s)
	}
	return out
}

// Candidates brings the index in dir of log up to date and returns the
// ranges whose segment may hold keys. pause is called before waiting for
// another search updating the same index; warn gets a segment that could
// not be written (the answer is right, a later query fixes the index).
// With check, the files read are watched and mapped, to be remembered
// when the index was up to date (see warm.go).
func (st *Store) Candidates(dir string, log *Log, keys []uint64, pause func(), warn func(error), check *warmCheck) ([]Span, error) {
	ix := &sessionIndex{st: st, dir: dir, log: log, keys: keys, warn: warn, pause: pause, check: check}
	err := ix.update()
	check.done(err == nil && ix.clean)
	return ix.spans, err
}

// searchLocks serialise index updates of one session (by its index
// directory's hash): two searches at once would build the same segments
// twice and could remove each other's.
var searchLocks [64]sync.Mutex

func searchLock(dir string) *sync.Mutex {
	h := fnv.New32a()
	h.Write([]byte(dir))
	return &searchLocks[h.Sum32()%uint32(len(searchLocks))]
}

// sessionIndex is one session's index while a query brings it up to date
// and asks it.
type sessionIndex struct {
	st      *Store
	dir     string // store path of the session's segments
	log     *Log
	keys    []uint64
	warn    func(error)
	pause   func()
	n       int    // closed segments kept on disk (0 … n-1); the last one is number n
	spans   []Span // ranges whose segment may hold the query
	check   *warmCheck
	clean   bool // the index was up to date: nothing written or dropped
	dropped bool // a segment or a stray was removed
}

// update checks the segments on disk, probes them, extends the last one
// with what was appended since, and probes what it added. A segment that
// does not fit (unreadable, another log, the log cut) is dropped with all
// after it, and indexing goes on from the last one that fits. A segment
// that cannot be written is still probed from memory: the answer is
// right, and the index is fixed by a later query.
func (ix *sessionIndex) update() error {
	mu := searchLock(ix.dir)
	if !mu.TryLock() {
		// The search holding it may wait for the slot this one holds.
		ix.pause()
		mu.Lock()
	}
	defer mu.Unlock()
	first := ix.load()
	if first == nil {
		ix.clean = !ix.dropped
		return nil // up to date
	}
	// Segments are written from number ix.n on: nothing after it may stay
	// to be read as their sequel.
	ix.st.tidy(ix.dir, ix.n+1)
	from := first.End
	last, err := Extend(ix.log.R, first, ix.log.Size, func(s *Segment) error {
		ix.probe(s)
		ix.write(s)
		ix.n++
		return nil
	})
	if err != nil {
		return err
	}
	ix.probe(last)
	if last.End > last.Start && (last != first || last.End != from) {
		ix.write(last)
	}
	return nil
}

// load checks and probes the segments on disk, reading only their
// headers and the blocks the query's keys fall in. It opens segments 0,
// 1, … until one is missing, without listing the directory (a listing
// costs as much as an open, and a query opens every session's index):
// the chain ends at the first number missing or at the first segment not
// closed. It returns the segment to extend: the last one read whole when
// the log grew past it, a new one after the last that fits, or nil when
// nothing is left to index. ix.n is then the number of the segment
// returned.
func (ix *sessionIndex) load() *Segment {
	ix.st.tidyOnce(ix.dir)
	var end int64
	for i := 0; ; i++ {
		f, h, err := ix.open(i, end)
		if errors.Is(err, fs.ErrNotExist) {
			ix.n = i
			return ix.fresh(end)
		}
		if err == nil && !h.Closed && h.End < ix.log.Size {
			s := ix.decode(f)
			f.Close()
			if s != nil {
				ix.n = i
				return s
			}
			err = ErrBadSegment
		}
		if err != nil {
			ix.drop(i)
			return ix.fresh(end)
		}
		ix.probeFile(f, h)
		ix.check.segment(f, h)
		f.Close()
		end = h.End
		if !h.Closed {
			ix.n = i // the last one, still open, and nothing to add to it
			ix.dropAfter(i + 1)
			return nil
		}
	}
}

// fresh is a new segment from end, nil when the log has nothing after it.
func (ix *sessionIndex) fresh(end int64) *Segment {
	if end >= ix.log.Size {
		return nil
	}
	return NewSegment(ix.log.Ident, end)
}

// tidy removes from the directory what is not one of the segments 0 …
// n-1 (n < 0: as many as are there without a gap): segments after a gap
// or after one not closed, leftovers of a replace a crash interrupted
// (nothing else writes here while the lock is held).
func (st *Store) tidy(dir string, n int) {
	ents, err := st.Root.ReadDir(dir)
	if err != nil {
		return
	}
	if n < 0 {
		n = chainLength(ents)
	}
	for _, ent := range ents {
		if i, ok := segmentNumber(ent.Name); !ok || i >= n {
			st.Root.RemoveAll(dir + "/" + ent.Name)
		}
	}
}

// chainLength counts the segments 0 … n-1 among ents (by name only).
func chainLength(ents []storefs.Entry) int {
	have := map[int]bool{}
	for _, ent := range ents {
		if i, ok := segmentNumber(ent.Name); ok {
			have[i] = true
		}
	}
	n := 0
	for have[n] {
		n++
	}
	return n
}

// tidyOnce tidies an index directory the first time this server queries
// it: what a crash of an earlier server left there goes, and later
// queries do not list it again (this server's own leftovers go when it
// drops or writes segments).
func (st *Store) tidyOnce(dir string) {
	if _, done := tidied.Get(dir); done {
		return
	}
	st.tidy(dir, -1)
	tidied.Put(dir, true)
}

var tidied Memory[string, bool]

// segmentNumber reads a segment file's name: a decimal number as
// strconv.Itoa writes it.
func segmentNumber(name string) (int, bool) {
	i, err := strconv.Atoi(name)
	return i, err == nil && i >= 0 && strconv.Itoa(i) == name
}

// open opens segment i and checks its header against the log: it must
// start at start, belong to this session and end where the log has the
// bytes it ended with. The error is fs.ErrNotExist when there is no
// segment i, ErrBadSegment when it does not fit.
func (ix *sessionIndex) open(i int, start int64) (*os.File, Header, error) {
	var h Header
	f, err := ix.st.Root.OpenFile(ix.dir+"/"+strconv.Itoa(i), os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, h, err
	}
	if err != nil {
		return nil, h, ErrBadSegment
	}
	ix.check.watch(f) // before its version is read: a change after it is an event
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, h, ErrBadSegment
	}
	key, known := fitKeyOf(st, ix.log)
	if h, ok := fits.Get(key); known && ok && h.Start == start {
		return f, h, nil
	}
	b := make([]byte, HeaderSize)
	_, err = f.ReadAt(b, 0)
	if err == nil {
		h, err = ParseHeader(b, st.Size())
	}
	if err != nil || h.Start != start || !h.Fits(ix.log.F, ix.log.Ident, ix.log.Size) || !checkedOnce(f, st) {
		f.Close()
		return nil, h, ErrBadSegment
	}
	if known {
		fits.Put(key, h)
	}
	return f, h, nil
}

// checkedOnce checks a segment file's bits (their checksum) the first time
// this server sees that version of the file: probes read only a few
// blocks, and a flipped bit could hide a match. Index files are replaced,
// never rewritten in place, so a version is its inode and times.
func checkedOnce(f *os.File, st os.FileInfo) bool {
	v, ok := VersionOf(st)
	if !ok {
		return false
	}
	if _, done := segmentChecks.Get(v); done {
		return true
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		return false
	}
	if _, err := DecodeSegment(b); err != nil {
		return false
	}
	segmentChecks.Put(v, true)
	return true
}

// FileVersion tells versions of a file apart: a file rewritten in any way
// gets a new ctime, which no user can set.
type FileVersion struct {
	dev, ino           uint64
	size, mtime, ctime int64
}

// VersionOf is the version of the file st describes; ok is false when st
// says too little.
func VersionOf(st os.FileInfo) (v FileVersion, ok bool) {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return v, false
	}
	return FileVersion{sys.Dev, sys.Ino, sys.Size, sys.Mtim.Nano(), sys.Ctim.Nano()}, true
}

var segmentChecks Memory[FileVersion, bool]

// fitKey is a segment file's version with the version of the log it was
// checked against, the length of the log read and the session's identity. The same key is the
// same bytes: segments are replaced, never rewritten in place, and a log
// that changes in any way gets a new ctime (which no user can set).
type fitKey struct {
	segment, log FileVersion
	size         int64
	ident        [16]byte
}

// fitKeyOf is the key of the segment file st for log; known is false
// when either version is unknown (the check is then made every time).
func fitKeyOf(st os.FileInfo, log *Log) (k fitKey, known bool) {
	if log.Info == nil {
		return k, false
	}
	seg, ok1 := VersionOf(st)
	lg, ok2 := VersionOf(log.Info)
	return fitKey{seg, lg, log.Size, log.Ident}, ok1 && ok2
}

// fits remembers the headers of the segments found to fit their log (the
// header parsed, the range and the bytes before its end checked, the bits'
// checksum checked): a query that finds the same segment file and the
// same log again reads neither its header nor the log.
var fits Memory[fitKey, Header]

// decode reads a segment whole (its bits checked); nil when it cannot.
func (ix *sessionIndex) decode(f *os.File) *Segment {
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil
	}
	s, err := DecodeSegment(b)
	if err != nil {
		return nil
	}
	return s
}

// probeFile notes a stored segment's range when its filter may hold the
// query; one that cannot be read is scanned rather than trusted.
func (ix *sessionIndex) probeFile(f *os.File, h Header) {
	if has, err := h.Probe(f, ix.keys); has || err != nil {
		ix.spans = append(ix.spans, Span{h.Start, h.End})
	}
}

// drop removes segment from and all after it, which no longer fit; the
// next segment written is number from.
func (ix *sessionIndex) drop(from int) {
	ix.n, ix.dropped = from, true
	ix.st.tidy(ix.dir, from)
}

// dropAfter removes what is in the directory besides segments 0 … n-1
// when something is there as segment n, which no chain may hold after a
// segment not closed. Looking costs one failed open.
func (ix *sessionIndex) dropAfter(n int) {
	f, err := ix.st.Root.OpenFile(ix.dir+"/"+strconv.Itoa(n), os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err == nil {
		f.Close()
	}
	ix.dropped = true
	ix.st.tidy(ix.dir, n)
}

// probe notes s's range when its filter may hold the query.
func (ix *sessionIndex) probe(s *Segment) {
	if s.End > s.Start && s.HasAll(ix.keys) {
		ix.spans = append(ix.spans, Span{s.Start, s.End})
	}
}

// write stores s as segment number ix.n.
func (ix *sessionIndex) write(s *Segment) {
	err := ix.st.MkdirAll(ix.dir, owner)
	if err == nil {
		err = ix.st.Root.ReplaceFile(ix.dir+"/"+strconv.Itoa(ix.n), s.Encode(), owner, storefs.NoSync)
	}
	if err != nil {
		ix.warn(err)
	}
}

// DropStale removes the index directories in dir (a container's) of
// sessions not in live (archived, deleted).
func (st *Store) DropStale(dir string, live []string) {
	ents, err := st.Root.ReadDir(dir)
	if err != nil {
		return
	}
	keep := map[string]bool{}
	for _, n := range live {
		keep[n] = true
	}
	for _, ent := range ents {
		if !keep[ent.Name] {
			st.Drop(dir, ent.Name)
		}
	}
}

// Drop removes the index directory in dir (a container's) of the session
// name, gone (archived, deleted): DropStale finds such directories only
// at the container's next search, so a user who built indexes by a
// search, then deleted the sessions and searched elsewhere, left them in
// the store, uncounted.
func (st *Store) Drop(dir, name string) {
	mu := searchLock(dir + "/" + name)
	mu.Lock()
	defer mu.Unlock()
	st.Root.RemoveAll(dir + "/" + name)
}
