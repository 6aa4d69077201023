package sealedlog

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/ctxfs/ctxfs/internal/storefs"
)

// The records of a log that could not be recovered at start are kept
// aside in the journal's directory (the server's own, root's, never
// served), so that one log a user spoiled (a FIFO in its place, a seal put
// back to an older one) never keeps the server from starting for everyone
// else, and nothing acknowledged is lost or applied to the wrong bytes:
//
//	unrecovered-<id>.note           for people: the log, why, what was kept, what to do;
//	                                while it exists the log is held (Held: unprovable)
//	unrecovered-<id>-<gen, 16 hex>  the log's records, in the journal's own format
//
// <id> names the log's path and binding (heldID), so a session made anew
// at the same place is not held. RecoverHeld (`ctxfs fsck --repair`, the
// server stopped) replays the kept records once the log is put right, as
// a start replays the journal, then removes the kept files, the note last.

const (
	heldPrefix  = "unrecovered-"
	heldNoteExt = ".note"
	// heldBatchBody bounds one batch of a kept file (a record bigger than
	// it is a batch of its own).
	heldBatchBody = 1 << 20
)

// heldAdvice is what an administrator does about a held log.
const heldAdvice = "stop the server, put the log back as a regular file that holds at least what its seal vouches for (the bytes it had), owned as its seal is, then run ctxfs fsck --repair, which applies them"

// heldID names a log and its binding among the kept files.
func heldID(at Place) string {
	h := sha256.New()
	h.Write([]byte("ctxfs unrecovered v1\x00"))
	h.Write([]byte(at.Log))
	h.Write([]byte{0})
	h.Write(at.Bind[:])
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func heldNote(dir string, at Place) string {
	return path.Join(dir, heldPrefix+heldID(at)+heldNoteExt)
}

func heldFile(dir, id string, gen uint64) string {
	return path.Join(dir, fmt.Sprintf("%s%s-%016x", heldPrefix, id, gen))
}

// parseHeldName splits a kept file's name: its id, and its generation
// (0 for the note).
func parseHeldName(name string) (id string, gen uint64, ok bool) {
	rest, ok := strings.CutPrefix(name, heldPrefix)
	if !ok {
		return "", 0, false
	}
	if id, ok := strings.CutSuffix(rest, heldNoteExt); ok && len(id) == 32 {
		return id, 0, true
	}
	id, g, ok := strings.Cut(rest, "-")
	if !ok || len(id) != 32 || len(g) != 16 {
		return "", 0, false
	}
	gen, err := strconv.ParseUint(g, 16, 64)
	return id, gen, err == nil && gen > 0
}

// Held reports whether records of the log at are kept aside in dir: the
// log is then unprovable until RecoverHeld applies them. A note that
// cannot be looked at counts as there (refusing is the safe side).
func Held(root *storefs.Root, dir string, at Place) bool {
	_, err := root.Lstat(heldNote(dir, at))
	return !errors.Is(err, os.ErrNotExist)
}

// HeldWords is what a held log's users are told (EIO): no store paths.
const HeldWords = "appends the write-ahead journal held for this log could not be recovered at start; they are kept for an administrator (ctxfs fsck)"

// heldSets lists the kept logs in dir: each id with its files'
// generations, oldest first (none when only the note is left), ids sorted.
func heldSets(root *storefs.Root, dir string) ([]string, map[string][]uint64, error) {
	ents, err := root.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	sets := map[string][]uint64{}
	var ids []string
	for _, e := range ents {
		id, gen, ok := parseHeldName(e.Name)
		if !ok {
			continue
		}
		if _, seen := sets[id]; !seen {
			ids = append(ids, id)
			sets[id] = nil
		}
		if gen > 0 {
			sets[id] = append(sets[id], gen)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		gens := sets[id]
		sort.Slice(gens, func(a, b int) bool { return gens[a] < gens[b] })
	}
	return ids, sets, nil
}

// hold keeps lg's records aside, durably, with a note, before the journal
// files holding them are removed; it changes nothing of the log.
func (rp *replay) hold(lg *replayLog, why string) error {
	id := heldID(lg.at)
	_, sets, err := heldSets(rp.root, rp.dir)
	if err != nil {
		return osError("recover", rp.root.Show(rp.dir), err)
	}
	gen := uint64(1)
	if gens := sets[id]; len(gens) > 0 {
		gen = gens[len(gens)-1] + 1 // kept once before and never applied: keep these after
	}
	kept := heldFile(rp.dir, id, gen)
	if err := rp.writeHeld(lg, kept, gen); err != nil {
		return osError("recover", rp.root.Show(kept), err)
	}
	note := heldNote(rp.dir, lg.at)
	what := fmt.Sprintf("%s; its %d appends are kept in %s, not applied", why, lg.count(recAppend), rp.root.Show(kept))
	text := fmt.Sprintf("ctxfs could not recover a log at start.\nlog: %s\nwhy: %s\nkept: %s (the journal's records for it)\nUntil they are applied the session is unprovable (EIO).\nTo apply them: %s.\n", rp.root.Show(lg.path), why, rp.root.Show(kept), heldAdvice)
	if err := rp.root.ReplaceFile(note, []byte(text), storefs.Owner{Uid: 0, Gid: 0, FileMode: 0o600}, storefs.SyncData); err != nil {
		return osError("recover", rp.root.Show(note), err)
	}
	if err := rp.root.SyncDir(rp.dir); err != nil {
		return osError("recover", rp.root.Show(rp.dir), err)
	}
	rp.held = append(rp.held, Problem{Path: rp.root.Show(lg.path), What: what + "; to apply them: " + heldAdvice})
	return nil
}

// writeHeld writes lg's records as the journal file rel of generation gen
// and makes it durable.
func (rp *replay) writeHeld(lg *replayLog, rel string, gen uint64) error {
	f, err := rp.root.OpenFile(rel, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	var batch []*jrec
	var body int
	var off int64
	num := uint64(0)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		b := encodeBatch(nil, gen, num, 0, batch) // read back with no fence: the token is not looked at
		if _, err := f.WriteAt(b, off); err != nil {
			return err
		}
		off += int64(len(b))
		num++
		batch, body = nil, 0
		return nil
	}
	for _, w := range lg.all {
		data := make([]byte, w.n)
		if _, err := rp.files[w.gen].ReadAt(data, w.pos); err != nil {
			return err
		}
		r := &jrec{kind: w.kind, path: lg.path, bind: lg.at.Bind, off: w.logOff, data: data}
		if body > 0 && body+r.size() > heldBatchBody {
			if err := flush(); err != nil {
				return err
			}
		}
		batch, body = append(batch, r), body+r.size()
	}
	if err := flush(); err != nil {
		return err
	}
	return fdatasync(f)
}

// count is how many of lg's records are of kind.
func (lg *replayLog) count(kind byte) int {
	n := 0
	for _, w := range lg.all {
		if w.kind == kind {
			n++
		}
	}
	return n
}

// openHeld reads the records kept for id into a plan; the caller closes
// its files.
func openHeld(root *storefs.Root, dir string, locate Locate, id string, gens []uint64) (*replay, error) {
	rp := newReplay(root, dir, locate, func(g uint64) string { return heldFile(dir, id, g) })
	if err := rp.scanFiles(gens); err != nil {
		return nil, err
	}
	return rp, nil
}

// heldWhy says why a kept log cannot take its records now ("" when it
// can), changing nothing.
func (rp *replay) heldWhy(lg *replayLog) (string, error) {
	f, why, err := rp.openLog(lg, os.O_RDONLY)
	if f != nil {
		f.Close()
	}
	return why, err
}

// eachHeld hands each kept log of dir to fn with its plan (nil when only
// the note is left) and the names of its files.
func eachHeld(root *storefs.Root, dir string, locate Locate, fn func(rp *replay, note string, files []string) error) error {
	ids, sets, err := heldSets(root, dir)
	if err != nil {
		return err
	}
	for _, id := range ids {
		note := path.Join(dir, heldPrefix+id+heldNoteExt)
		var files []string
		for _, g := range sets[id] {
			files = append(files, heldFile(dir, id, g))
		}
		var rp *replay
		if len(files) > 0 {
			if rp, err = openHeld(root, dir, locate, id, sets[id]); err != nil {
				return err
			}
		}
		err := fn(rp, note, files)
		if rp != nil {
			rp.closeFiles()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// HeldProblems names each log whose records are kept aside in dir, what
// is kept and what to do, changing nothing (`ctxfs fsck`).
func HeldProblems(root *storefs.Root, dir string, locate Locate) ([]Problem, error) {
	var out []Problem
	err := eachHeld(root, dir, locate, func(rp *replay, note string, files []string) error {
		if rp == nil {
			out = append(out, Problem{Path: root.Show(note), What: "a note of kept records with no records left: ctxfs fsck --repair removes it"})
			return nil
		}
		kept := root.Show(files[0])
		if len(files) > 1 {
			kept += fmt.Sprintf(" and %d more", len(files)-1)
		}
		for _, p := range rp.problems {
			out = append(out, Problem{Path: p.Path, What: "kept records are damaged: " + p.What})
		}
		for _, lg := range rp.order {
			if !lg.due() {
				continue
			}
			why, err := rp.heldWhy(lg)
			if err != nil {
				return err
			}
			what := fmt.Sprintf("%d appends the journal held for this log could not be recovered at start and are kept in %s (see %s)", lg.count(recAppend), kept, root.Show(note))
			if why != "" {
				what += "; it cannot take them now: " + why + "; to apply them: " + heldAdvice
			} else {
				what += "; it can take them now: run ctxfs fsck --repair with the server stopped"
			}
			out = append(out, Problem{Path: root.Show(lg.path), What: what})
		}
		return nil
	})
	return out, err
}

// RecoverHeld replays the records kept aside in dir into each log that can
// now take them (put right by an administrator), as a start replays the
// journal, and then removes what was kept, the note last. A log that still
// cannot take them is left held, named with why. The caller makes sure no
// server holds the store.
func RecoverHeld(root *storefs.Root, dir string, locate Locate) (repaired []Problem, err error) {
	err = eachHeld(root, dir, locate, func(rp *replay, note string, files []string) error {
		if rp != nil {
			done, err := rp.applyHeld()
			if err != nil || !done {
				return err
			}
			for _, lg := range rp.order {
				if lg.due() {
					repaired = append(repaired, Problem{Path: root.Show(lg.path), What: fmt.Sprintf("applied the %d appends kept for it", lg.count(recAppend))})
				}
			}
		}
		for _, rel := range append(files, note) {
			if err := root.Remove(rel); err != nil && !errors.Is(err, os.ErrNotExist) {
				return osError("recover", root.Show(rel), err)
			}
			if err := root.SyncDir(dir); err != nil {
				return osError("recover", root.Show(dir), err)
			}
		}
		return nil
	})
	return repaired, err
}

// applyHeld applies a kept plan when every log in it can take its records
// (a kept file holds one log's); it reports whether it did.
func (rp *replay) applyHeld() (bool, error) {
	if len(rp.problems) > 0 {
		return false, nil
	}
	for _, lg := range rp.order {
		if !lg.due() {
			continue
		}
		if why, err := rp.heldWhy(lg); why != "" || err != nil {
			return false, err
		}
	}
	for _, lg := range rp.order {
		if !lg.due() {
			continue
		}
		if why, err := rp.applyLog(lg); why != "" || err != nil {
			if err == nil {
				err = fmt.Errorf("%s: %s", rp.root.Show(lg.path), why) // it changed since heldWhy
			}
			return false, err
		}
	}
	return true, nil
}
