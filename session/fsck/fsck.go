package fsck

import (
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/sealedlog"
	"github.com/ctxfs/ctxfs/session/versions"
)

// Report receives fsck's findings as they come.
type Report struct {
	Problem  func(path, what string) // one line per problem
	Repaired func(path, what string) // --repair: what was cut
	Progress func(done, total int)   // after each session
	Ways     func(ways string)       // the ways the last server recorded (storefs.RecordWays), when one is portable
	// Note gets what fsck passed over that is no problem: journal batches
	// a writer host wrote after its lease was lost (sealedlog's fence).
	Note func(path, what string)
}

// Check re-verifies a store from scratch (SPEC section 6): what the store
// holds against what it should (checkShape: symlinks, devices, FIFOs,
// wrong owners or modes, leftovers), then each session's logs against
// their seals, line by line, its identity, and each single-value file.
// It changes nothing unless repair is set, and then only cuts torn final
// appends, reporting each. Paths are reported as store paths. It returns
// the number of problems left.
//
// served says that a server holds the store: its journal and logs move
// while fsck reads them, so a log found longer than its seal and journal
// is looked at again, with the journal read again, before it is reported
// (its checkpoint may have sealed it and dropped a journal file between
// the two reads). Bytes past the journal's records in a log it has an
// intent for are appends not yet durable, served or not, as a follower
// takes them: a line written through an open descriptor is durable only
// at its fsync or close, or a second later.
func Check(store string, repair, served bool, r Report) (int, error) {
	root, err := storefs.Open(store)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	private := checkPrivate(store, repair, r)
	if ways, _ := root.RecordedWays(); r.Ways != nil && storefs.Portable(ways) {
		r.Ways(ways) // as the server found them at its last mount: fsck does not write to probe
	}
	named := map[string]bool{} // what the journal or the shape walk named is not named again
	key, problems, err := fsckMigration(root, repair, r)
	if err != nil {
		return 0, err
	}
	plan, n, err := fsckJournal(root, key, repair, served, named, r)
	if err != nil {
		return 0, err
	}
	problems += n
	checkShape(root, func(rel, what string, leftover bool) {
		if named[root.Show(rel)] && !leftover {
			return // the journal's reading named it
		}
		named[root.Show(rel)] = true
		if leftover {
			// What an interrupted write left (a temporary file or directory)
			// is what a crash at any instant may leave: never served, and
			// removed when its directory is next loaded. Not a problem;
			// repair removes it now, saying so.
			if repair && root.RemoveAll(rel) == nil && r.Repaired != nil {
				r.Repaired(root.Show(rel), "removed the "+what)
			}
			return
		}
		problems++
		if r.Problem != nil {
			r.Problem(root.Show(rel), what)
		}
	})
	dirs := layout.SessionDirs(root)
	for i, dir := range dirs {
		problems += fsckSession(root, plan, dir, repair, named, r)
		if r.Progress != nil {
			r.Progress(i+1, len(dirs))
		}
	}
	return problems + private, nil
}

// checkPrivate holds the store directory to the server's rule
// (storefs.Secure): its own and 0700, so that users reach it only through
// the mount and the sockets. A wider mode is a problem (a user may read
// every session in it), which repair narrows as a mount would; a store of
// another owner or below a directory others may change is one repair
// leaves to a person. It returns the problems it reported.
func checkPrivate(store string, repair bool, r Report) int {
	err := storefs.CheckPrivate(store)
	if err == nil {
		return 0
	}
	if repair && storefs.Secure(store) == nil {
		if r.Repaired != nil {
			r.Repaired(store, "made the store directory the server's alone (0700): "+err.Error())
		}
		return 0
	}
	if r.Problem != nil {
		r.Problem(store, err.Error())
	}
	return 1
}

// fsckJournal checks the write-ahead journal and returns what it adds to
// each log, so that each log is judged against its seal as the journal
// brings it up to date. It changes nothing, so it can look at the store of
// a running server (whose appends may race it: a report about a log being
// appended to then is worth a second look). With repair, it first replays
// the journal as the server's start would, replaying what can be proven of
// a damaged one and reporting the rest as lost, and applies the records
// a start kept aside for a log it could not recover, once that log is put
// right (the caller makes sure no server holds the store). Logs whose
// records are still kept aside are problems, named with what to do.
//
// A journal file or fence that cannot be read as one (a symlink or a
// directory in its place, a fence that is not one) is a problem of the
// store like any other, named in named: nothing is replayed, and each log
// is judged against its seal alone.
func fsckJournal(root *storefs.Root, key *sealedlog.Key, repair, served bool, named map[string]bool, r Report) (*journalView, int, error) {
	var repairErr error
	if repair {
		repairErr = repairJournal(root, key, r)
		if _, damaged := journalDamage(repairErr); repairErr != nil && !damaged {
			return nil, 0, repairErr
		}
	}
	v := &journalView{root: root, key: key, served: served}
	var problems []sealedlog.Problem
	err := v.read()
	if err == nil && repairErr != nil {
		return nil, 0, repairErr // the repair failed for another reason than the reading names
	}
	if err != nil {
		p, damaged := journalDamage(err)
		if !damaged {
			return nil, 0, err
		}
		v.plan = &sealedlog.JournalPlan{} // nothing past the seals
		named[p.Path] = true
		problems = append(problems, p)
	}
	note(r, v.plan.Notes)
	held, err := sealedlog.HeldProblems(root, layout.JournalDir, layout.LocateLog(root, key))
	if err != nil {
		return nil, 0, err
	}
	problems = slices.Concat(problems, v.plan.Problems, held)
	for _, p := range problems {
		if r.Problem != nil {
			r.Problem(p.Path, p.What)
		}
	}
	return v, len(problems), nil
}

// repairJournal replays the journal as a server's start would, with
// what can be proven of a damaged one, and applies the records a start
// kept aside for a log now put right, reporting each to r.
func repairJournal(root *storefs.Root, key *sealedlog.Key, r Report) error {
	rec, err := sealedlog.RecoverJournal(root, layout.JournalDir, layout.LocateLog(root, key), true)
	if err != nil {
		return err
	}
	held, err := sealedlog.RecoverHeld(root, layout.JournalDir, layout.LocateLog(root, key))
	if err != nil {
		return err
	}
	note(r, rec.Ignored)
	for _, p := range slices.Concat(rec.Repaired, held) {
		if r.Repaired != nil {
			r.Repaired(p.Path, p.What)
		}
	}
	return nil
}

// journalDamage is err as a problem of the store when it says that one
// of the journal's files cannot be read as such (EIO, naming the file),
// not that fsck could not look (a permission, a failing read of the
// directory: fsck then cannot run).
func journalDamage(err error) (sealedlog.Problem, bool) {
	var ae *abi.Error
	if !errors.As(err, &ae) || ae.Errno != unix.EIO || ae.Path == "" {
		return sealedlog.Problem{}, false
	}
	return sealedlog.Problem{Path: ae.Path, What: ae.Msg}, true
}

// note hands each of ps to r.Note.
func note(r Report, ps []sealedlog.Problem) {
	for _, p := range ps {
		if r.Note != nil {
			r.Note(p.Path, p.What)
		}
	}
}

// fsckMigration is the store's seal key, with the problems met reading
// it. With repair (no server holds the store) the store is first brought
// to the current layout as a server's start would: the key made when
// missing, the seals keyed, history given to the server, each migration
// reported. Without, the key is read and nothing changed.
func fsckMigration(root *storefs.Root, repair bool, r Report) (*sealedlog.Key, int, error) {
	if repair {
		key, migrated, err := layout.OpenSealKey(root)
		if migrated > 0 && r.Repaired != nil {
			r.Repaired(root.Show(layout.StateDir), fmt.Sprintf("%d seals of an older ctxfs keyed with the store's seal key", migrated))
		}
		if err != nil {
			return nil, 0, err
		}
		closed, err := layout.CloseHistory(root)
		if closed > 0 && r.Repaired != nil {
			r.Repaired(root.Show(layout.StateDir), fmt.Sprintf("%d files and directories of history given to the server", closed))
		}
		return key, 0, err
	}
	problems := 0
	key := layout.ReadSealKey(root, func(path, what string) {
		problems++
		if r.Problem != nil {
			r.Problem(path, what)
		}
	})
	return key, problems, nil
}

// journalView is fsck's reading of the journal.
type journalView struct {
	root   *storefs.Root
	key    *sealedlog.Key // the store's seal key
	served bool
	plan   *sealedlog.JournalPlan
}

func (v *journalView) read() error {
	p, err := sealedlog.PlanJournal(v.root, layout.JournalDir, layout.LocateLog(v.root, v.key), true)
	v.plan = p
	return err
}

// servedRetries and servedPause: how often, and after how long, a log of a
// running server that looked wrong is looked at again: a checkpoint
// that overtook the journal's reading is over within milliseconds.
const (
	servedRetries = 3
	servedPause   = 50 * time.Millisecond
)

// verify checks one log against its seal and the journal.
func (v *journalView) verify(at sealedlog.Place) []sealedlog.Problem {
	ps := v.plan.Verify(at)
	for i := 0; i < servedRetries && len(ps) > 0 && v.served; i++ {
		time.Sleep(servedPause)
		if v.read() != nil {
			break
		}
		ps = v.plan.Verify(at)
	}
	return ps
}

// fsckSession checks the session directory dir and reports its problems,
// returning how many.
func fsckSession(root *storefs.Root, plan *journalView, dir string, repair bool, named map[string]bool, r Report) int {
	var found []sealedlog.Problem
	report := func(path, what string) {
		if !named[path] {
			found = append(found, sealedlog.Problem{Path: path, What: what})
		}
	}
	was, _ := root.Lstat(dir)
	checkSession(root, plan, dir, repair, report, r)
	if plan.served && len(found) > 0 && sessionGone(root, dir, was) {
		return 0 // archived, deleted or made anew by its user meanwhile
	}
	for _, p := range found {
		if r.Problem != nil {
			r.Problem(p.Path, p.What)
		}
	}
	return len(found)
}

// sessionGone reports whether the session directory dir, which was was
// (nil: missing) when fsck took it up, is gone or another since: beside
// a running server its user may archive or delete it at any time, and
// what fsck found of it in between says nothing about the store.
func sessionGone(root *storefs.Root, dir string, was *unix.Stat_t) bool {
	now, err := root.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return true
	}
	return err == nil && (was == nil || now.Dev != was.Dev || now.Ino != was.Ino)
}

// checkSession hands each problem of the session directory dir to
// report; r gets what repair did.
func checkSession(root *storefs.Root, plan *journalView, dir string, repair bool, report func(path, what string), r Report) {
	identity, problem := layout.ReadIdentity(root, dir)
	if problem != "" {
		report(root.Show(layout.SealRel(dir, layout.IdentityFile)), problem)
	}
	for _, f := range layout.SessionLogs {
		at := layout.LogPlace(root, plan.key, dir, f, identity)
		for _, p := range plan.verify(at) {
			if problem != "" && strings.Contains(p.What, "bound to another") {
				continue // said once, as the identity's problem
			}
			if repair && p.Repairable {
				if what, err := sealedlog.Repair(at); err == nil {
					if r.Repaired != nil {
						r.Repaired(p.Path, what)
					}
					continue
				}
			}
			report(p.Path, p.What)
		}
	}
	for _, p := range versions.Verify(root, plan.key, dir) {
		report(p.Path, p.What)
	}
	for name, check := range valueChecks {
		p := dir + "/" + name
		b, err := root.ReadFile(p, layout.MaxValueFile)
		if err != nil {
			if !(name == abi.FileState && errors.Is(err, fs.ErrNotExist)) { // a missing state is an old session
				report(root.Show(p), "unreadable: "+layout.ErrWords(err))
			}
			continue
		}
		if what := check(b); what != "" {
			report(root.Show(p), what)
		}
	}
}

var digits = regexp.MustCompile(`^[0-9]+\n$`)

// valueChecks validate a session's single-value files and meta.json.
var valueChecks = map[string]func([]byte) string{
	abi.FileState: func(b []byte) string {
		if !strings.HasSuffix(string(b), "\n") || !abi.ValidState(strings.TrimSuffix(string(b), "\n")) {
			return "not a state: " + strings.TrimSpace(string(b))
		}
		return ""
	},
	abi.FileCwd: func(b []byte) string {
		if !strings.HasSuffix(string(b), "\n") || abi.CheckCwd(strings.TrimSuffix(string(b), "\n")) != nil {
			return "not an absolute cwd"
		}
		return ""
	},
	abi.FileCreatedAt: unixCheck,
	abi.FileUpdatedAt: unixCheck,
	abi.FileMeta: func(b []byte) string {
		if _, err := proto.ParseObject(b, true); err != nil {
			return "not a JSON object: " + err.Error()
		}
		return ""
	},
}

func unixCheck(b []byte) string {
	if !digits.Match(b) {
		return "not Unix seconds"
	}
	return ""
}
