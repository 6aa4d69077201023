package sealedlog

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/storefs"
)

// JournalReader reads a writer's journal beside it, for a reader that
// asks again and again (a follower host): PendingValues for its index of
// a container, read again each second while asked (Values), and
// PlanJournalFor for each log it verifies at an open (Plan). It keeps,
// for each journal file, where the batches it read end, the last change
// of each value in them and each log's records (where their bytes are),
// and reads only the batches written since, where PendingValues and
// PlanJournalFor read the journal whole each time
// (docs/benchmarks.md#a-followers-verification).
//
// It says what they say (TestJournalReaderAsPendingValues,
// TestJournalReaderPlanAsPlanJournalFor). A file no longer there was
// checkpointed (its values are in the files, its logs' records under
// their seals) and is forgotten. What it cannot follow reads the journal
// whole again, as they do: the fence rewritten (which batches count may
// have changed), a file replaced (another inode, or the last batch read
// no longer where it was), a batch that does not read with a valid batch
// after it (damage, or a fenced-off writer's bytes), more log records
// than it keeps (maxLogRecords).
type JournalReader struct {
	root *storefs.Root
	dir  string

	mu    sync.Mutex
	fence []byte                  // the fence file the files were read under (nil: none)
	files map[uint64]*pendingFile // by generation
	read  int                     // batches read, for the tests
	kept  int                     // log records kept, in all files
}

// maxLogRecords bounds the log records a JournalReader keeps (about 70
// bytes each, 18 MiB at most: a journal file of 64 MiB holds 200,000
// appends of 200 bytes): past it, a file's further records are not kept,
// and Plan reads the journal whole, as PlanJournalFor, while that file
// is there. (A variable for the tests.)
var maxLogRecords = 1 << 18

// pendingFile is what was read of one journal file.
type pendingFile struct {
	ino      uint64
	end      int64  // where the batches read end: the next one starts here
	num      uint64 // the next batch's number
	lastAt   int64  // the last batch read, and its header: still there if the file is the same
	lastHead []byte
	values   map[string]jwrite        // the last change of each value in this file
	logs     map[[32]byte][]logRecord // each log's records in this file, by binding, in order
	records  int                      // how many logs holds
	partial  bool                     // records past maxLogRecords were not kept
	paths    map[string]string        // each log path once: a log's records share it
}

// logRecord is a log's record as replay takes it: where its bytes are,
// and whether its batch counts.
type logRecord struct {
	w       jwrite
	history bool
}

// NewJournalReader reads the journal in dir of root, changing nothing.
func NewJournalReader(root *storefs.Root, dir string) *JournalReader {
	return &JournalReader{root: root, dir: dir, files: map[uint64]*pendingFile{}}
}

// errFollow says the journal changed in a way the reader does not follow.
var errFollow = errors.New("journal changed beyond what was read")

// Values is PendingValues(root, dir, under), reading only what the
// journal gained since the last call.
func (jr *JournalReader) Values(under string) (map[string]PendingValue, error) {
	open, follows, done, err := jr.catchUp()
	if err != nil {
		return nil, err
	}
	defer done()
	if !follows {
		return PendingValues(jr.root, jr.dir, under)
	}
	return jr.values(under, open), nil
}

// Plan is PlanJournalFor(root, dir, locate, pendingOK, bind), reading
// only what the journal gained since the last call.
func (jr *JournalReader) Plan(locate Locate, pendingOK bool, bind [32]byte) (*JournalPlan, error) {
	open, follows, done, err := jr.catchUp()
	if err != nil {
		return nil, err
	}
	defer done()
	if !follows || jr.partial() {
		return PlanJournalFor(jr.root, jr.dir, locate, pendingOK, bind)
	}
	rp := journalReplay(jr.root, jr.dir, locate)
	rp.only, rp.files = &bind, open
	for _, g := range jr.gens() {
		for _, lr := range jr.files[g].logs[bind] {
			r := &jrec{kind: lr.w.kind, path: lr.w.logPath, bind: bind, off: lr.w.logOff}
			rp.take(r, lr.w, lr.history)
		}
	}
	return rp.plan(pendingOK)
}

// catchUp takes the reader and reads what the journal gained (updated);
// follows is false when the caller must read the journal whole. The
// files it opened stay open until done, which also lets the reader go:
// as PendingValues keeps them, so that a file a checkpoint removes
// meanwhile is still read, never skipped while an older one is not.
func (jr *JournalReader) catchUp() (open map[uint64]*os.File, follows bool, done func(), err error) {
	jr.mu.Lock()
	open = map[uint64]*os.File{}
	done = func() {
		closeAll(open)
		jr.mu.Unlock()
	}
	if follows, err = jr.updated(open); err != nil {
		done()
		return nil, false, nil, err
	}
	return open, follows, done, nil
}

// updated reads what the journal gained (update); follows is false when
// it changed in a way the reader does not follow (errFollow), and the
// caller reads it whole. After either, or an error, what was read is
// forgotten. Caller holds mu.
func (jr *JournalReader) updated(open map[uint64]*os.File) (follows bool, err error) {
	err = jr.update(open)
	if err != nil {
		jr.reset()
	}
	if errors.Is(err, errFollow) {
		return false, nil
	}
	return err == nil, err
}

// closeAll closes the journal files a call opened.
func closeAll(open map[uint64]*os.File) {
	for _, f := range open {
		f.Close()
	}
}

// reset forgets what was read: the next call reads the journal whole.
func (jr *JournalReader) reset() {
	jr.files, jr.kept = map[uint64]*pendingFile{}, 0
}

// forget drops what was read of generation gen.
func (jr *JournalReader) forget(gen uint64) {
	if pf := jr.files[gen]; pf != nil {
		jr.kept -= pf.records
		delete(jr.files, gen)
	}
}

// partial says whether a file read holds log records not kept.
func (jr *JournalReader) partial() bool {
	for _, pf := range jr.files {
		if pf.partial {
			return true
		}
	}
	return false
}

// gens are the generations read, oldest first.
func (jr *JournalReader) gens() []uint64 {
	gens := make([]uint64, 0, len(jr.files))
	for g := range jr.files {
		gens = append(gens, g)
	}
	slices.Sort(gens)
	return gens
}

// update reads what the journal's files gained. Caller holds mu.
func (jr *JournalReader) update(open map[uint64]*os.File) error {
	fenceBytes, err := jr.root.ReadFile(FencePath(jr.dir), maxFence)
	if errors.Is(err, fs.ErrNotExist) {
		fenceBytes, err = nil, nil
	}
	if err != nil {
		return osError("fence", jr.root.Show(FencePath(jr.dir)), err)
	}
	if !bytes.Equal(fenceBytes, jr.fence) {
		jr.fence = fenceBytes
		jr.reset()
	}
	fc, err := readFence(jr.root, jr.dir)
	if err != nil {
		return err
	}
	gens, err := journalGens(jr.root, jr.dir)
	if err != nil {
		return err
	}
	there := map[uint64]bool{}
	for _, g := range gens {
		there[g] = true
		if err := jr.readFile(g, fc, open); err != nil {
			return err
		}
	}
	for g := range jr.files {
		if !there[g] {
			jr.forget(g) // checkpointed: its values are in the files
		}
	}
	return nil
}

// readFile reads the batches generation gen gained since the last call,
// and leaves the file in open.
func (jr *JournalReader) readFile(gen uint64, fc *fence, open map[uint64]*os.File) error {
	rel := path.Join(jr.dir, journalName(gen))
	f, err := jr.root.OpenFile(rel, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		jr.forget(gen) // removed since it was listed
		return nil
	}
	if err != nil {
		return osError("recover", jr.root.Show(rel), err)
	}
	open[gen] = f
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return osError("recover", jr.root.Show(rel), err)
	}
	pf := jr.files[gen]
	if pf != nil && (pf.ino != st.Ino || !pf.lastStill(f)) {
		return errFollow // the same name, another file
	}
	if pf == nil {
		pf = &pendingFile{ino: st.Ino, values: map[string]jwrite{}, logs: map[[32]byte][]logRecord{}, paths: map[string]string{}}
		jr.files[gen] = pf
	}
	return jr.readBatches(f, gen, st.Size, pf, fc)
}

// lastStill says whether the last batch read is still where it was, as
// it was (its header holds its body's checksum).
func (pf *pendingFile) lastStill(f *os.File) bool {
	if pf.lastHead == nil {
		return true
	}
	head := make([]byte, len(pf.lastHead))
	n, _ := f.ReadAt(head, pf.lastAt)
	return n == len(head) && bytes.Equal(head, pf.lastHead)
}

// readBatches reads pf's file from where its batches read end, as
// scanFile reads it, keeping each value's last change in the batches
// that count.
func (jr *JournalReader) readBatches(f *os.File, gen uint64, size int64, pf *pendingFile, fc *fence) error {
	for pf.end < size {
		h, b, ok := readBatch(f, pf.end, size, gen, pf.num)
		if !ok {
			if _, more := nextBatch(f, pf.end+journalAlign, size, gen); more {
				return errFollow // damage, or a fenced-off writer's bytes: scanFile's to judge
			}
			return nil // the end of what was written, or a batch being written now
		}
		jr.read++
		history := fc.counts(h.token, gen, pf.end+h.size())
		recs, _ := decodeRecords(b[h.hlen:])
		eachWrite(recs, gen, pf.end+int64(h.hlen), func(r *jrec, w jwrite) {
			switch {
			case r.kind == recValue || r.kind == recRemove:
				if history {
					pf.values[r.path] = w
				}
			case jr.kept >= maxLogRecords:
				pf.partial = true
			case history || r.kind == recIntent: // what replay takes (take)
				p, ok := pf.paths[r.path]
				if !ok {
					p = r.path
					pf.paths[p] = p
				}
				w.logPath = p
				pf.logs[r.bind] = append(pf.logs[r.bind], logRecord{w: w, history: history})
				pf.records++
				jr.kept++
			}
		})
		pf.lastAt, pf.lastHead = pf.end, b[:h.hlen:h.hlen]
		pf.end += h.size()
		pf.num++
	}
	return nil
}

// values is the last change of each value under the prefix, the newest
// file's over the older's. Caller holds mu.
func (jr *JournalReader) values(under string, open map[uint64]*os.File) map[string]PendingValue {
	out := map[string]PendingValue{}
	for _, g := range jr.gens() {
		for rel, w := range jr.files[g].values {
			if !strings.HasPrefix(rel, under) || path.Clean(rel) != rel {
				continue
			}
			if w.kind == recRemove {
				out[rel] = PendingValue{Removed: true}
				continue
			}
			// A change that cannot be read is left out, as PendingValues
			// leaves it, not the older change it replaced.
			b := make([]byte, w.n)
			_, err := open[g].ReadAt(b, w.pos)
			if _, data, ok := decodeValue(b); err == nil && ok {
				out[rel] = PendingValue{Data: data}
			} else {
				delete(out, rel)
			}
		}
	}
	return out
}
