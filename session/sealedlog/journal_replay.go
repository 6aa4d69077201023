package sealedlog

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/storefs"
)

// Locate says which log a journal record's path names now: its Place (seal
// and binding, from the session's identity), or an error when no session
// log can be there (its directory is gone, its identity unreadable).
type Locate func(logRel string) (Place, error)

// Recovery is what RecoverJournal found and did.
type Recovery struct {
	Problems []Problem // what keeps the journal from being replayed (or, with repair, what was lost)
	Repaired []Problem // with repair: what was done about each problem
	Held     []Problem // logs that could not be recovered: their records were kept aside (held.go)
	Ignored  []Problem // batches of writers fenced off (journal_fence.go): not history, not damage
	Batches  int       // valid batches read
	Logs     int       // logs brought up to date
	NextGen  uint64    // the generation the next journal file takes
}

// RecoverJournal replays the journal files in dir into their logs, as a
// start after a crash must: each log gets the bytes its durable records
// hold past its seal, is synced and sealed, and the files are removed.
//
// Only the newest file's last batch may be torn (a batch is synced before
// the next is written); it was never acknowledged and is ignored. A bad
// batch with a good one after it is damage of the journal itself (root's
// file, which no user can touch): without repair, nothing is changed and
// the problems are returned. With repair, what can be proven is replayed
// (each log up to its first gap), the rest is reported as lost, and the
// journal is removed; a log whose file holds bytes past its first gap is
// left as it is, not cut: it reads as unprovable (EIO) until a person
// decides.
//
// One log that cannot take its records (gone, another session's, not a
// regular file, of another owner than its seal, shorter than or different
// from what its seal vouches for, its seal unreadable, or its records not
// following its seal) never stops the others: its records are set aside,
// durably, in dir (hold, held.go), the log is left untouched, and
// it is named in Held. Its session is unprovable until an administrator
// puts the log right and `ctxfs fsck --repair` applies them (RecoverHeld).
func RecoverJournal(root *storefs.Root, dir string, locate Locate, repair bool) (*Recovery, error) {
	rp, gens, err := scanJournal(root, dir, locate)
	if err != nil {
		return nil, err
	}
	defer rp.closeFiles()
	rec := &Recovery{NextGen: 1}
	if len(gens) > 0 {
		rec.NextGen = gens[len(gens)-1] + 1
	}
	damaged := len(rp.problems) > 0
	rec.Batches, rec.Ignored = rp.batches, rp.ignored
	if damaged && !repair {
		rec.Problems = rp.problems
		return rec, nil
	}
	if damaged {
		rp.lostToDamage() // gaps the damage made: replayed up to the gap
	}
	rec.Problems = rp.problems
	n, err := rp.apply()
	if err != nil {
		return nil, err
	}
	rec.Logs, rec.Held = n, rp.held
	for _, p := range rec.Problems {
		rec.Repaired = append(rec.Repaired, Problem{Path: p.Path, What: "replayed what could be proven; " + p.What})
	}
	for _, g := range gens {
		if err := root.Remove(path.Join(dir, journalName(g))); err != nil {
			return nil, osError("recover", root.Show(path.Join(dir, journalName(g))), err)
		}
	}
	if len(gens) > 0 {
		if err := root.SyncDir(dir); err != nil {
			return nil, err
		}
	}
	return rec, nil
}

// scanJournal reads every journal file in dir, oldest first, into a plan
// for each log. The caller closes the plan's files.
func scanJournal(root *storefs.Root, dir string, locate Locate) (*replay, []uint64, error) {
	return scanJournalOf(root, dir, locate, nil)
}

// scanJournalOf is scanJournal for the one log bound by only (nil: all).
func scanJournalOf(root *storefs.Root, dir string, locate Locate, only *[32]byte) (*replay, []uint64, error) {
	gens, err := journalGens(root, dir)
	if err != nil {
		return nil, nil, err
	}
	rp := journalReplay(root, dir, locate)
	rp.only = only
	if rp.fence, err = readFence(root, dir); err != nil {
		return nil, nil, err
	}
	if err := rp.scanFiles(gens); err != nil {
		return nil, nil, err
	}
	return rp, gens, nil
}

// journalReplay is a replay of the journal files in dir.
func journalReplay(root *storefs.Root, dir string, locate Locate) *replay {
	return newReplay(root, dir, locate, func(g uint64) string { return path.Join(dir, journalName(g)) })
}

func newReplay(root *storefs.Root, dir string, locate Locate, name func(gen uint64) string) *replay {
	return &replay{root: root, dir: dir, locate: locate, name: name, logs: map[string]*replayLog{}, values: map[string]*replayValue{}, files: map[uint64]*os.File{}, counted: map[uint64]bool{}}
}

// scanFiles reads the files of gens, oldest first, into the plan. On an
// error the files are closed.
func (rp *replay) scanFiles(gens []uint64) error {
	for _, g := range gens {
		if err := rp.scanFile(g); err != nil {
			rp.closeFiles()
			return err
		}
	}
	rp.judgeTails(gens)
	rp.finish()
	return nil
}

// tail is a bad batch that no batch of history follows in its file: the
// torn write of a crash if no later file holds history, else damage.
type tail struct {
	gen, num uint64
	pos      int64
}

// judgeTails makes each tail that a later file's history follows a
// problem: only the newest file's last batch may be torn (an older file
// was cut to its last batch before the next one was made). Without a
// fence, any later file counts, as before fencing; with one, a later file
// holding only a fenced-off writer's batches does not.
func (rp *replay) judgeTails(gens []uint64) {
	for _, t := range rp.tails {
		followed := false
		for _, g := range gens {
			followed = followed || g > t.gen && (rp.fence == nil || rp.counted[g])
		}
		if followed {
			rp.problem(rp.name(t.gen), fmt.Sprintf("batch %d at byte %d is damaged, and 0 valid batches follow it", t.num, t.pos))
		}
	}
}

// journalGens lists the generations of the journal files in dir, oldest first.
func journalGens(root *storefs.Root, dir string) ([]uint64, error) {
	ents, err := root.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var gens []uint64
	for _, e := range ents {
		if g, ok := parseJournalName(e.Name); ok {
			gens = append(gens, g)
		}
	}
	sort.Slice(gens, func(a, b int) bool { return gens[a] < gens[b] })
	return gens, nil
}

// replay is RecoverJournal's work: the plan for each log, built from the
// records in order, and the problems met.
type replay struct {
	root     *storefs.Root
	dir      string
	locate   Locate
	name     func(gen uint64) string // the store path of a generation's file
	logs     map[string]*replayLog   // by path and binding
	order    []*replayLog
	values   map[string]*replayValue // the last change of each value file
	vorder   []*replayValue
	files    map[uint64]*os.File // open journal files, by generation
	problems []Problem           // damage of the journal itself
	held     []Problem           // logs whose records were set aside (apply)
	batches  int
	fence    *fence          // which writers' batches are history (nil: every batch is)
	counted  map[uint64]bool // the generations holding a batch of history
	tails    []tail          // bad batches no batch of history follows in their file
	ignored  []Problem       // fenced-off batches, one note per file
	// only, when set, is the binding of the one log planned
	// (PlanJournalFor): every other log's records are passed over
	// unread, and no other log is located.
	only *[32]byte
}

// replayLog is one log's plan.
type replayLog struct {
	at      Place
	path    string
	base    *record  // the seal's latest record
	cur     int64    // the log's length once the writes are done
	writes  []jwrite // journal bytes to put into the log, in order
	absent  string   // why no log can take these records (gone, another session)
	pending int      // appends held for an absent log
	gap     string   // the first record that did not follow: nothing after it is applied
	retired bool     // a later record says the log was checkpointed and closed: all of it is settled
	intent  bool     // the log may hold appends past what the journal holds: cut them
	all     []jwrite // every append and intent record of the log, in order: what hold keeps
	lost    bool     // a repair of a damaged journal: replayed up to the gap, the rest is lost
}

// jwrite is one record's data: where it is in the journal and in the log.
type jwrite struct {
	kind    byte
	gen     uint64
	pos     int64
	n       int
	logOff  int64
	logPath string
}

func (rp *replay) problem(rel, what string) {
	rp.problems = append(rp.problems, Problem{Path: rp.root.Show(rel), What: what})
}

// scanFile reads one journal file batch by batch. A bad batch with a
// batch of history after it in the file is damage; one without is a tail
// (judgeTails), unless a fenced-off writer wrote there (past where the
// fence saw the file end, or in a file it made after the fence): that is
// not history and not damage. Batches of a fenced-off writer are passed
// over, but for their intent records (take).
func (rp *replay) scanFile(gen uint64) error {
	rel := rp.name(gen)
	f, err := rp.root.OpenFile(rel, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil // a running server's checkpoint removed it: its logs are sealed
	}
	if err != nil {
		return osError("recover", rp.root.Show(rel), err)
	}
	rp.files[gen] = f
	st, err := f.Stat()
	if err != nil {
		return osError("recover", rp.root.Show(rel), err)
	}
	size := st.Size()
	var stale staleBatches
	for pos, num := int64(0), uint64(0); pos < size; num++ {
		h, b, ok := readBatch(f, pos, size, gen, num)
		if !ok {
			if !rp.fencedOff(gen, pos) {
				if later := rp.countHistory(f, pos+journalAlign, size, gen); later > 0 {
					rp.problem(rel, fmt.Sprintf("batch %d at byte %d is damaged, and %d valid batches follow it", num, pos, later))
				} else {
					rp.tails = append(rp.tails, tail{gen: gen, num: num, pos: pos})
				}
			}
			next, ok := nextBatch(f, pos+journalAlign, size, gen)
			if !ok {
				break
			}
			pos, num = next.pos, next.h.num-1
			continue
		}
		history := rp.fence.counts(h.token, gen, pos+h.size())
		recs, err := decodeRecords(b[h.hlen:])
		if err != nil && history {
			rp.problem(rel, fmt.Sprintf("batch %d at byte %d: %v", num, pos, err))
		}
		eachWrite(recs, gen, pos+int64(h.hlen), func(r *jrec, w jwrite) { rp.take(r, w, history) })
		if history {
			rp.batches++
			rp.counted[gen] = true
		} else {
			stale.add(h.token, pos)
		}
		pos += h.size()
	}
	if stale.n > 0 {
		rp.ignored = append(rp.ignored, Problem{Path: rp.root.Show(rel), What: stale.words(rp.fence.token())})
	}
	return nil
}

// eachWrite calls fn with each of a batch's records and where its data
// lies in generation gen's file: the batch's records begin at pos.
func eachWrite(recs []*jrec, gen uint64, pos int64, fn func(r *jrec, w jwrite)) {
	for _, r := range recs {
		pos += int64(r.size() - len(r.data))
		fn(r, jwrite{kind: r.kind, gen: gen, pos: pos, n: len(r.data), logOff: r.off, logPath: r.path})
		pos += int64(len(r.data))
	}
}

// fencedOff says whether the bytes at pos of generation gen are where only
// a fenced-off writer writes: past where the newest fence saw its newest
// file end (a writer writes only its newest file: an older one was cut to
// its last batch, so a bad batch there is damage, as without a fence), or
// in a file made after the fence that holds no history.
func (rp *replay) fencedOff(gen uint64, pos int64) bool {
	if rp.fence == nil {
		return false
	}
	last := rp.fence.epochs[len(rp.fence.epochs)-1]
	if end, named := last.ends[gen]; named {
		return pos >= end && gen == slices.Max(slices.Collect(maps.Keys(last.ends)))
	}
	return !rp.counted[gen]
}

// staleBatches counts a file's batches of fenced-off writers.
type staleBatches struct {
	n      int
	from   int64
	tokens []uint64
}

func (s *staleBatches) add(token uint64, pos int64) {
	if s.n == 0 {
		s.from = pos
	}
	s.n++
	if !slices.Contains(s.tokens, token) {
		s.tokens = append(s.tokens, token)
	}
}

func (s *staleBatches) words(fenced uint64) string {
	return fmt.Sprintf("%d batches from byte %d, of writer token %v, were written after its writer's lease was lost (the fence is at token %d): not history, not applied", s.n, s.from, s.tokens, fenced)
}

// readBatch reads and verifies the batch at pos: its header must be valid,
// of this file's generation and the expected number, and its CRC hold.
// It returns the header, and the header and body's bytes.
func readBatch(f *os.File, pos, size int64, gen, num uint64) (batchHeader, []byte, bool) {
	h, ok := headerAt(f, pos, size)
	if !ok || h.gen != gen || h.num != num {
		return batchHeader{}, nil, false
	}
	b := make([]byte, h.hlen+h.body)
	if _, err := f.ReadAt(b, pos); err != nil || !h.check(b) {
		return batchHeader{}, nil, false
	}
	return h, b, true
}

func headerAt(f *os.File, pos, size int64) (batchHeader, bool) {
	var hb [batchHeaderLen]byte
	n := min(int64(batchHeaderLen), size-pos)
	if n < batchHeaderLenV1 {
		return batchHeader{}, false
	}
	if _, err := f.ReadAt(hb[:n], pos); err != nil && err != io.EOF {
		return batchHeader{}, false
	}
	h, ok := decodeHeader(hb[:n])
	if !ok || pos+int64(h.hlen+h.body) > size {
		return batchHeader{}, false
	}
	return h, true
}

// found is a valid batch met while looking past a damaged one.
type found struct {
	pos int64
	h   batchHeader
}

// nextBatch finds the next valid batch of gen at or after pos (batches
// start on journalAlign boundaries).
func nextBatch(f *os.File, pos, size int64, gen uint64) (found, bool) {
	for ; pos < size; pos += journalAlign {
		if h, ok := headerAt(f, pos, size); ok && h.gen == gen {
			if _, _, ok := readBatch(f, pos, size, gen, h.num); ok {
				return found{pos, h}, true
			}
		}
	}
	return found{}, false
}

// countHistory counts the valid batches of gen at or after pos that are
// history (the fence lets them count).
func (rp *replay) countHistory(f *os.File, pos, size int64, gen uint64) int {
	n := 0
	for {
		b, ok := nextBatch(f, pos, size, gen)
		if !ok {
			return n
		}
		if rp.fence.counts(b.h.token, gen, b.pos+b.h.size()) {
			n++
		}
		pos = b.pos + journalAlign
	}
}

// take adds one record to its log's plan. A record that is not history
// (of a fenced-off writer) adds nothing, but for an intent: the log may
// hold what that writer wrote past what counts, which replay then cuts.
func (rp *replay) take(r *jrec, w jwrite, history bool) {
	if !history && r.kind != recIntent {
		return
	}
	isValue := r.kind == recValue || r.kind == recRemove
	if rp.locate == nil && !isValue {
		return // only the values are read (PendingValues): no log is located
	}
	if isValue {
		v := rp.values[r.path]
		if v == nil {
			v = &replayValue{rel: r.path}
			rp.values[r.path] = v
			rp.vorder = append(rp.vorder, v)
		}
		v.remove, v.w = r.kind == recRemove, w
		return
	}
	if rp.only != nil && r.bind != *rp.only {
		return
	}
	key := r.path + "\x00" + string(r.bind[:])
	if r.kind == recRetire {
		if lg := rp.logs[key]; lg != nil {
			lg.retired = true // everything before it is in the log, which may have moved
			delete(rp.logs, key)
		}
		return
	}
	lg := rp.logs[key]
	if lg == nil {
		lg = rp.open(r)
		rp.logs[key] = lg
		rp.order = append(rp.order, lg)
	}
	if history {
		lg.all = append(lg.all, w)
	}
	if r.kind == recIntent {
		lg.intent = true
		return
	}
	switch end := r.off + int64(w.n); {
	case lg.absent != "":
		lg.pending++
	case lg.gap != "":
	case end <= lg.base.length:
		// Sealed already: a checkpoint got there before the crash.
	case r.off == lg.cur:
		lg.writes = append(lg.writes, w)
		lg.cur = end
	default:
		lg.gap = fmt.Sprintf("the journal's next append starts at byte %d, the log ends at %d: an append is missing; what the log holds past byte %d is not proven", r.off, lg.cur, lg.cur)
	}
}

// open starts the plan of the log a record names, from its seal.
func (rp *replay) open(r *jrec) *replayLog {
	lg := &replayLog{path: r.path, at: Place{Log: r.path, Bind: r.bind}}
	at, err := rp.locate(r.path)
	switch {
	case err != nil:
		lg.absent = "no session log is there: " + err.Error()
		return lg
	case at.Bind != r.bind:
		lg.absent = "the session there is another one"
		return lg
	}
	lg.at = at
	f, err := rp.root.OpenFile(at.Seal, os.O_RDONLY, 0)
	if err != nil {
		lg.absent = "its seal cannot be read: " + storefs.Words(err)
		return lg
	}
	defer f.Close()
	ss, err := readSeal(f, at.Key)
	switch {
	case err != nil || ss.latest == nil:
		lg.absent = "its seal holds no valid record"
	case !ss.latest.committed:
		lg.absent = "its seal holds an unfinished append of a server without the journal"
	case ss.latest.bind != r.bind:
		lg.absent = "its seal is bound to another session"
	default:
		lg.base, lg.cur = ss.latest, ss.latest.length
	}
	return lg
}

// finish orders the problems met.
func (rp *replay) finish() {
	sort.Slice(rp.problems, func(a, b int) bool { return rp.problems[a].Path < rp.problems[b].Path })
}

// lostToDamage makes each gap a problem of the damaged journal, for a
// repair: such a log is replayed up to its gap, and the rest is what the
// damage took (a gap in a whole journal is the log's own trouble: its
// records are set aside, unrecoverable).
func (rp *replay) lostToDamage() {
	for _, lg := range rp.order {
		if !lg.retired && lg.absent == "" && lg.gap != "" {
			rp.problem(lg.path, lg.gap)
			lg.lost = true
		}
	}
	rp.finish()
}

// trouble says why a log cannot take its records as it is ("" when it
// can): gone, another session's, or not following its seal. A log that
// is retired, or has no records past its seal, has none.
func (lg *replayLog) trouble() string {
	switch {
	case lg.retired:
		return ""
	case lg.absent != "":
		if lg.pending == 0 {
			return "" // only intents, for a log nobody can append to
		}
		return fmt.Sprintf("the journal holds %d appends for this log, which was never retired and cannot take them: %s", lg.pending, lg.absent)
	case lg.lost:
		return ""
	}
	return lg.gap
}

// due says whether the log has anything to replay or to set aside.
func (lg *replayLog) due() bool {
	switch {
	case lg.retired:
		return false
	case lg.absent != "":
		return lg.pending > 0
	}
	return len(lg.writes) > 0 || lg.intent || lg.gap != ""
}

// apply carries out the plans: each log gets its bytes, is synced, then
// sealed; a log that cannot take them has them set aside (hold, held.go). It
// returns how many logs it brought up to date.
func (rp *replay) apply() (int, error) {
	n := 0
	for _, lg := range rp.order {
		if !lg.due() {
			continue
		}
		why, err := rp.applyLog(lg)
		if err != nil {
			return n, err
		}
		if why != "" {
			if err := rp.hold(lg, why); err != nil {
				return n, err
			}
			continue
		}
		n++
	}
	for _, v := range rp.vorder {
		if err := rp.applyValue(v); err != nil {
			return n, osError("recover", rp.root.Show(v.rel), err)
		}
	}
	return n, nil
}

// applyLog replays one log's records. It returns why the log cannot take
// them ("": done), having changed nothing then. The log is opened only
// once it is known to be a regular file (storefs looks with O_PATH first),
// so a FIFO or a device in its place is never opened.
func (rp *replay) applyLog(lg *replayLog) (string, error) {
	f, why, err := rp.openLog(lg, os.O_RDWR)
	if f == nil {
		return why, err
	}
	defer f.Close()
	h, err := rp.eachWrite(lg, func(b []byte, off int64) error {
		if _, err := f.WriteAt(b, off); err != nil {
			return osError("recover", rp.root.Show(lg.at.Log), err)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if lg.intent && lg.gap == "" {
		// What the log holds past the journal was written but never made
		// durable, and so never acknowledged as durable: it goes, whole
		// lines or torn, so that the seal covers the file exactly.
		if err := cutTo(f, lg.cur); err != nil {
			return "", osError("recover", rp.root.Show(lg.at.Log), err)
		}
	}
	if err := fdatasync(f); err != nil {
		return "", osError("recover", rp.root.Show(lg.at.Log), err)
	}
	if len(lg.writes) == 0 {
		return "", nil // the seal already vouches for cur
	}
	seal, err := rp.root.OpenFile(lg.at.Seal, os.O_RDWR, 0)
	if err != nil {
		return "", osError("recover", rp.root.Show(lg.at.Seal), err)
	}
	defer seal.Close()
	r := newRecord(lg.base.seq+1, lg.cur, true, h, lg.at.Bind)
	if err := writeRecord(seal, r, lg.at.Key); err != nil {
		return "", osError("recover", rp.root.Show(lg.at.Seal), err)
	}
	return "", nil
}

// openLog opens lg's log with flags once it is known to be able to take
// the records; otherwise it returns no file and why not (or an error of
// the server's own).
func (rp *replay) openLog(lg *replayLog, flags int) (*os.File, string, error) {
	if why := lg.trouble(); why != "" {
		return nil, why, nil
	}
	f, err := rp.root.OpenFile(lg.at.Log, flags, 0)
	if err != nil {
		why, err := unopenable(err)
		return nil, why, err
	}
	if why, err := rp.builtOn(lg, f); why != "" || err != nil {
		f.Close()
		return nil, why, err
	}
	return f, "", nil
}

// unopenable turns a failed open of a log into why it cannot be
// recovered: missing or not a regular file. Other errors (EIO of the
// disk, EMFILE) are the server's trouble, not the log's, and stop the
// replay as before.
func unopenable(err error) (string, error) {
	if errors.Is(err, os.ErrNotExist) || storefs.IsUnsafe(err) {
		return what(err, "log file is missing"), nil
	}
	return "", err
}

// builtOn says how the open log f is not what the journal's records build
// on ("" when it is): the records continue the bytes the seal vouches
// for, so the file must hold at least those, exactly, and be owned as its
// seal is (a log the user swapped for a file of someone else's, or a hard
// link to one, is not written through). It reads the vouched-for prefix
// once: a start after a crash pays that for each log the journal touched.
func (rp *replay) builtOn(lg *replayLog, f *os.File) (string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "", osError("recover", rp.root.Show(lg.at.Log), err)
	}
	sp, err := rp.root.Lstat(lg.at.Seal) // the seal's owner is the log's
	switch {
	case errors.Is(err, os.ErrNotExist) || storefs.IsUnsafe(err):
		return "seal: " + what(err, "missing"), nil
	case err != nil:
		return "", osError("recover", rp.root.Show(lg.at.Seal), err)
	}
	switch {
	case st.Uid != sp.Uid:
		return fmt.Sprintf("owned by uid %d, its seal by uid %d", st.Uid, sp.Uid), nil
	case st.Nlink != 1:
		return fmt.Sprintf("it has %d links, a log has one", st.Nlink), nil
	case st.Size < lg.base.length:
		return fmt.Sprintf("it is %d bytes, shorter than the %d its seal vouches for and the journal's appends build on", st.Size, lg.base.length), nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, lg.base.length)); err != nil {
		return "", osError("recover", rp.root.Show(lg.at.Log), err)
	}
	if [sha256.Size]byte(h.Sum(nil)) != lg.base.digest {
		return fmt.Sprintf("its first %d bytes are not what its seal vouches for and the journal's appends build on", lg.base.length), nil
	}
	return "", nil
}

// eachWrite hands each of a log's journal writes to fn, in order, and
// returns the log's running hash after them.
func (rp *replay) eachWrite(lg *replayLog, fn func(b []byte, logOff int64) error) (hash.Hash, error) {
	h, err := resumeHash(lg.base.state)
	if err != nil {
		return nil, osError("recover", rp.root.Show(lg.at.Seal), err)
	}
	for _, w := range lg.writes {
		b := make([]byte, w.n)
		if _, err := rp.files[w.gen].ReadAt(b, w.pos); err != nil {
			return nil, osError("recover", rp.root.Show(path.Join(rp.dir, journalName(w.gen))), err)
		}
		if err := fn(b, w.logOff); err != nil {
			return nil, err
		}
		h.Write(b)
	}
	return h, nil
}

// JournalPlan is what the journal would add to each log, for checking the
// logs of a store without changing it (fsck, with or without a server
// running): a log is judged against its seal as the journal brings it up
// to date.
type JournalPlan struct {
	Problems []Problem
	Notes    []Problem             // batches of fenced-off writers, passed over (not problems)
	ext      map[string]*extension // by log path
}

// extension is one log's share of the journal: the record its seal would
// hold after replay, and whether bytes past it may be appends not yet
// durable.
type extension struct {
	rec    *record
	intent bool
}

// PlanJournal reads the journal in dir and changes nothing. pendingOK
// says whether bytes past what the journal holds, in a log it has an
// intent for, are appends not yet durable (a store whose server stopped:
// its next start cuts them) or a problem (a running server's appends
// become durable within moments, so the caller looks again).
func PlanJournal(root *storefs.Root, dir string, locate Locate, pendingOK bool) (*JournalPlan, error) {
	return planJournal(root, dir, locate, pendingOK, nil)
}

// PlanJournalFor is PlanJournal for the one log whose binding is bind (a
// follower verifying a log at its open): the journal is read whole, for
// its own damage, but no other log is located and only this one's
// writes are read and hashed, which were most of the cost
// (docs/benchmarks.md#a-followers-verification).
func PlanJournalFor(root *storefs.Root, dir string, locate Locate, pendingOK bool, bind [32]byte) (*JournalPlan, error) {
	return planJournal(root, dir, locate, pendingOK, &bind)
}

func planJournal(root *storefs.Root, dir string, locate Locate, pendingOK bool, only *[32]byte) (*JournalPlan, error) {
	rp, _, err := scanJournalOf(root, dir, locate, only)
	if err != nil {
		return nil, err
	}
	defer rp.closeFiles()
	return rp.plan(pendingOK)
}

// plan is what the journal, as rp read it, would add to each log.
func (rp *replay) plan(pendingOK bool) (*JournalPlan, error) {
	root, dir := rp.root, rp.dir
	p := &JournalPlan{Problems: rp.problems, Notes: rp.ignored, ext: map[string]*extension{}}
	for _, lg := range rp.order {
		if why := lg.trouble(); why != "" {
			p.Problems = append(p.Problems, Problem{Path: root.Show(lg.path), What: why + "; the next start keeps its records aside (" + root.Show(heldNote(dir, lg.at)) + ") and serves every other log"})
		}
		if lg.retired || lg.absent != "" {
			continue
		}
		h, err := rp.eachWrite(lg, func([]byte, int64) error { return nil })
		if err != nil {
			return nil, err
		}
		p.ext[lg.at.Log] = &extension{rec: newRecord(lg.base.seq+1, lg.cur, true, h, lg.at.Bind), intent: lg.intent && pendingOK}
	}
	return p, nil
}

// Verify is Verify for a log the journal may extend.
func (p *JournalPlan) Verify(at Place) []Problem {
	if p == nil {
		return Verify(at)
	}
	return verify(at, p.ext[at.Log])
}

// cutTo truncates f to size when it is longer.
func cutTo(f *os.File, size int64) error {
	st, err := f.Stat()
	if err != nil || st.Size() <= size {
		return err
	}
	return f.Truncate(size)
}

func (rp *replay) closeFiles() {
	for _, f := range rp.files {
		f.Close()
	}
}
