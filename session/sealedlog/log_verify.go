package sealedlog

import (
	"bufio"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
)

// scanResult is what one pass over a log found: its length, the SHA-256 of
// the prefixes the seal speaks of, and the first malformed line.
type scanResult struct {
	size    int64
	sums    map[int64][sha256.Size]byte // prefix length -> digest; always holds size
	badOff  int64                       // offset of the first malformed line, -1 if none
	badWhat string                      // "line 3 is not a JSON object"
	// openTail is true when the file does not end in "\n": its last line is
	// unfinished, which only a torn append may leave.
	openTail bool
}

// scanLog hashes the whole log once, taking the digest at each mark, and
// checks every complete line with abi.CheckLogLine. It reads through its own
// offsets (pread), so it neither needs nor moves the file position.
func scanLog(f *os.File, marks ...int64) (*scanResult, error) {
	res := &scanResult{sums: map[int64][sha256.Size]byte{}, badOff: -1}
	marks = slices.Sorted(slices.Values(marks)) // hashChunk takes them in order
	h := sha256.New()
	for _, m := range marks {
		if m == 0 {
			res.sums[0] = [sha256.Size]byte(h.Sum(nil))
		}
	}
	br := bufio.NewReaderSize(io.NewSectionReader(f, 0, 1<<62), 256<<10)
	var line []byte // the current line so far, capped just above the limit
	lineLen, lineNo, lineStart := 0, 1, int64(0)
	for {
		chunk, err := br.ReadSlice('\n')
		hashChunk(h, res, chunk, marks)
		res.size += int64(len(chunk))
		if len(line)+len(chunk) <= abi.MaxLineBytes+1 {
			line = append(line, chunk...)
		}
		lineLen += len(chunk)
		if n := len(chunk); n > 0 && chunk[n-1] == '\n' {
			if res.badOff < 0 {
				res.checkLine(line, lineLen-1, lineNo, lineStart)
			}
			line, lineLen, lineStart = line[:0], 0, res.size
			lineNo++
		}
		if err == io.EOF {
			break
		}
		if err != nil && err != bufio.ErrBufferFull {
			return nil, err
		}
	}
	res.openTail = lineLen > 0
	res.sums[res.size] = [sha256.Size]byte(h.Sum(nil))
	return res, nil
}

// hashChunk feeds chunk (which starts at res.size) to h, taking the digest
// at every mark that falls inside it.
func hashChunk(h hash.Hash, res *scanResult, chunk []byte, marks []int64) {
	start, done := res.size, int64(0)
	for _, m := range marks {
		if m > start+done && m <= start+int64(len(chunk)) {
			h.Write(chunk[done : m-start])
			done = m - start
			res.sums[m] = [sha256.Size]byte(h.Sum(nil))
		}
	}
	h.Write(chunk[done:])
}

// checkLine records the first malformed line, numbered from 1, in the words
// of abi.CheckLogLine ("line 3 is not a JSON object"). line holds the line
// with its newline unless it ran over the limit; n is its length without.
func (res *scanResult) checkLine(line []byte, n, lineNo int, off int64) {
	var what string
	if n > abi.MaxLineBytes {
		what = fmt.Sprintf("line %d of %d bytes is over the %d-byte limit", lineNo, n, abi.MaxLineBytes)
	} else if err := abi.CheckLogLine(line[:n]); err != nil {
		what = lineWords(err, lineNo)
	} else {
		return
	}
	res.badOff, res.badWhat = off, what
}

// lineWords turns "line is not a JSON object" into "line 3 is not a JSON object".
func lineWords(err error, lineNo int) string {
	msg := err.Error()
	var ae *abi.Error
	if errors.As(err, &ae) {
		msg = ae.Msg
	}
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		return fmt.Sprintf("line %d %s", lineNo, rest)
	}
	return fmt.Sprintf("line %d: %s", lineNo, msg)
}

// Problem is one thing wrong with a log or its seal, as `ctxfs fsck` prints
// it ("<path>: <what>"). Repairable marks a torn final append, the only
// damage Repair may cut.
type Problem struct {
	Path       string
	What       string
	Repairable bool
}

// examination is the verdict on a log and its seal. The log is provable
// when problems holds nothing unrepairable; it is then vouched for by base:
// the latest record, or for a torn append the record before it.
type examination struct {
	size     int64
	seal     *sealState // nil when there is no seal to read
	base     *record
	torn     bool // latest is an unfinished append; bytes past base.length are not vouched for
	pending  bool // bytes past base.length may be appends not yet durable (a journal's intent)
	problems []Problem

	logF, sealF *os.File // what openAndExamine opened (Repair writes through them)
}

// provable says whether the log can be used once a torn append is cut.
func (ex *examination) provable() bool {
	for _, p := range ex.problems {
		if !p.Repairable {
			return false
		}
	}
	return ex.base != nil
}

// summary is the problems as one line, for an EIO error.
func (ex *examination) summary() string {
	var w []string
	for _, p := range ex.problems {
		w = append(w, p.What)
	}
	return strings.Join(w, "; ")
}

// examine reads the seal and scans the log once, then decides. seal is nil
// when the seal file does not exist. It changes nothing.
//
// ext is what a journal adds to the log (nil: nothing): when it goes past
// the seal, the log is judged against it, and with an intent, bytes past
// it are appends not yet durable.
func examine(at Place, logF *os.File, seal *os.File, ext *extension) (*examination, error) {
	logPath, sealPath := at.Root.Show(at.Log), at.Root.Show(at.Seal)
	ex := &examination{}
	var marks []int64
	if seal != nil {
		s, err := readSeal(seal, at.Key)
		if err != nil {
			return nil, osError("read seal", sealPath, err)
		}
		if ext != nil && s.latest != nil && s.latest.committed && s.latest.length <= ext.rec.length {
			s = &sealState{latest: ext.rec}
			ex.pending = ext.intent
		}
		ex.seal = s
		if s.latest != nil {
			marks = append(marks, s.latest.length)
		}
		if s.prev != nil {
			marks = append(marks, s.prev.length)
		}
	}
	scan, err := scanLog(logF, marks...)
	if err != nil {
		return nil, osError("read", logPath, err)
	}
	ex.size = scan.size
	ex.judge(logPath, sealPath, scan, at.Bind)
	return ex, nil
}

// judge applies the rules of section 6: the log must be exactly what the
// latest record vouches for, or an append interrupted by a crash on top of
// what the record before it vouches for. Anything else is damaged history.
func (ex *examination) judge(logPath, sealPath string, scan *scanResult, bind [32]byte) {
	s := ex.seal
	add := func(path, what string, repairable bool) {
		ex.problems = append(ex.problems, Problem{Path: path, What: what, Repairable: repairable})
	}
	end := scan.size // the part of the log whose lines must be well formed
	switch {
	case s == nil:
		add(sealPath, "seal is missing", false)
	case s.keyless():
		add(sealPath, "seal cannot be checked: "+errNoKey.Error(), false)
	case s.forged() != "":
		add(sealPath, "seal does not verify (forged, or from another store): "+s.forged(), false)
	case s.latest == nil:
		add(sealPath, fmt.Sprintf("seal has no valid record (slot 0: %v; slot 1: %v)", s.slotErr[0], s.slotErr[1]), false)
	case s.latest.bind != bind || s.prev != nil && s.prev.bind != bind:
		add(sealPath, "seal belongs to another log: it is bound to another session or file", false)
	case scan.size == s.latest.length && scan.sums[scan.size] == s.latest.digest:
		ex.base = s.latest
	case ex.pending && scan.size > s.latest.length && scan.sums[s.latest.length] == s.latest.digest:
		ex.base, end = s.latest, s.latest.length // the rest is not durable yet
	case ex.tornAppend(scan):
		ex.base, ex.torn, end = s.prev, true, s.prev.length
		if k := scan.size - s.prev.length; k > 0 {
			add(logPath, fmt.Sprintf("torn final append: %d bytes past the last sealed length %d", k, s.prev.length), true)
		}
	default:
		add(logPath, mismatch(scan, s.latest), false)
	}
	if scan.badOff >= 0 && scan.badOff < end {
		add(logPath, scan.badWhat, false)
	}
	if scan.openTail && !ex.torn && end == scan.size {
		add(logPath, "last line has no trailing newline", false)
	}
	if !ex.provable() {
		ex.base = nil
	}
}

// tornAppend says whether the log is what a crash during an append leaves:
// the intent record (latest, uncommitted) was synced, then some but not all
// of its bytes reached the log, and everything before them is what the
// previous record vouches for. Those bytes were never acknowledged.
func (ex *examination) tornAppend(scan *scanResult) bool {
	latest, prev := ex.seal.latest, ex.seal.prev
	return !latest.committed && prev != nil &&
		scan.size >= prev.length && scan.size < latest.length &&
		scan.sums[prev.length] == prev.digest
}

// mismatch says how a log differs from the record that should vouch for it.
func mismatch(scan *scanResult, r *record) string {
	switch {
	case scan.size < r.length:
		return fmt.Sprintf("length %d does not match seal %d", scan.size, r.length)
	case scan.size > r.length && scan.sums[r.length] == r.digest:
		return fmt.Sprintf("length %d does not match seal %d: %d bytes were added behind the store's back", scan.size, r.length, scan.size-r.length)
	case scan.size > r.length:
		return fmt.Sprintf("length %d does not match seal %d, and the first %d bytes do not match its digest", scan.size, r.length, r.length)
	}
	return fmt.Sprintf("content does not match the seal's digest (length %d)", r.length)
}

// Verify re-verifies a log and its seal from scratch, for `ctxfs fsck`, and
// changes nothing. It returns one Problem per thing wrong, none when clean.
// A seal whose latest append was interrupted before any byte reached the log
// is consistent, not a problem; Open finishes it.
func Verify(at Place) []Problem { return verify(at, nil) }

func verify(at Place, ext *extension) []Problem {
	ex, done, err := openAndExamine(at, os.O_RDONLY, ext)
	if err != nil {
		return []Problem{*err}
	}
	defer done()
	return ex.problems
}

// openAndExamine opens a log and its seal with flags and examines them.
// A problem opening either is returned as the one Problem.
func openAndExamine(at Place, flags int, ext *extension) (ex *examination, done func(), prob *Problem) {
	logF, err := at.Root.OpenFile(at.Log, flags, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, &Problem{Path: at.Root.Show(at.Log), What: "log file is missing"}
	}
	if err != nil {
		return nil, nil, &Problem{Path: at.Root.Show(at.Log), What: "cannot open log: " + storefs.Words(err)}
	}
	seal, err := at.Root.OpenFile(at.Seal, flags, 0)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		logF.Close()
		return nil, nil, &Problem{Path: at.Root.Show(at.Seal), What: "cannot open seal: " + storefs.Words(err)}
	}
	done = func() {
		logF.Close()
		if seal != nil {
			seal.Close()
		}
	}
	ex, err = examine(at, logF, seal, ext)
	if err != nil {
		done()
		return nil, nil, &Problem{Path: at.Root.Show(at.Log), What: storefs.Words(err)}
	}
	ex.logF, ex.sealF = logF, seal
	return ex, done, nil
}

// Repair cuts a torn final append, the one repair section 6 allows, and
// reseals durably. It says what it did, or fails with EIO when the log needs
// more than that (damaged history is never rewritten).
func Repair(at Place) (string, error) {
	ex, done, prob := openAndExamine(at, os.O_RDWR, nil)
	if prob != nil {
		return "", abi.Errorf(syscall.EIO, "repair", "%s: %s", prob.Path, prob.What)
	}
	defer done()
	if !ex.provable() {
		return "", abi.Errorf(syscall.EIO, "repair", "%s: %s", at.Root.Show(at.Log), ex.summary())
	}
	if !ex.torn || ex.size == ex.base.length {
		return "nothing to repair", nil
	}
	if err := finishTorn(ex.logF, ex.sealF, ex, at.Key); err != nil {
		return "", osError("repair", at.Root.Show(at.Log), err)
	}
	return fmt.Sprintf("cut %d bytes of a torn final append", ex.size-ex.base.length), nil
}

// finishTorn resolves an interrupted append: it cuts the unacknowledged
// bytes, syncs the log, then writes a committed record for what remains. In
// that order, a crash in between leaves a state examine still accepts.
func finishTorn(logF, seal *os.File, ex *examination, key *Key) error {
	if ex.size > ex.base.length {
		if err := logF.Truncate(ex.base.length); err != nil {
			return err
		}
		if err := logF.Sync(); err != nil {
			return err
		}
	}
	r := *ex.base
	r.seq, r.committed = ex.seal.latest.seq+1, true
	return writeRecord(seal, &r, key)
}
