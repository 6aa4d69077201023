package session

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/index"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/sealedlog"
	"golang.org/x/sys/unix"
)

// runSlots is the most runs one session runs at once; more wait in a queue.
var runSlots = runtime.NumCPU() * 4

func scopeOfHome(home string) string {
	if strings.HasPrefix(home, "shared/") {
		return abi.ScopeShared
	}
	return abi.ScopePrivate
}

// lookup returns the loaded session r, loading it from the store if it
// exists (ENOENT when it does not), and holds it in the cache until
// release is called: a session in use is never closed under its user.
func (e *Engine) lookup(r layout.Ref) (s *sess, release func(), err error) {
	if r.Temp {
		if s, ok := e.temps.find(r.Key()); ok {
			return s, func() {}, nil // memory only: dropped once idle (temp.go), nothing to close
		}
		return nil, nil, &abi.Error{Errno: syscall.ENOENT, Msg: "no temp session " + r.Name}
	}
	return e.sessions.Acquire(r.Key(), func() (*sess, error) {
		e.derived.Attach(r.Rel()) // its values waiting to be written are the loaded session's
		s, err := e.load(r)
		if err != nil {
			e.derived.Release(r.Rel())
		}
		return s, err
	})
}

// create makes the session r (atomically, with the initial layout) unless
// it exists.
func (e *Engine) create(r layout.Ref, own storefs.Owner, cwd string, held *heldNames) error {
	if r.Temp {
		return e.createTemp(r, uint32(own.Uid), cwd)
	}
	if e.sessionExists(r) {
		return nil
	}
	if _, err := e.createFilled(r, own, filled{cwd: cwd, held: held}); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if x, err := e.Index(r.Container); err == nil {
		x.Add(r.Name)
	}
	e.changed(r.Container.Rel())
	return nil
}

// idle reports whether the session may be closed and dropped from the
// cache (a temp session: from tempSessions): no run is queued or running,
// no run's end waits to be recorded. Derived values waiting to be written
// do not keep it: they are written as it closes, and those whose write
// fails wait without it (behind.Queue.Release).
func (s *sess) idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.active) == 0 && len(s.pending) == 0
}

// closeLogs writes the session's derived values and seals and closes its
// logs when it leaves the cache: a session that loads again reads them
// from the store. A value whose write fails stays, loose, for the next
// pass (behind.Queue). Caller holds the session's cache key (a close, a take).
//
// A log that did not close cleanly is the error: its acknowledged appends
// may be proven by the journal alone, which keeps them for the next start
// (sealedlog.Log.Close), so the session must stay where it is.
func (s *sess) closeLogs() error {
	s.e.flushDerived(s.rel, s, false)
	err := s.events.Close()
	if merr := s.msgs.Close(); err == nil {
		err = merr
	}
	s.e.derived.Release(s.rel)
	return err
}

// evict is closeLogs for a session the cache drops: nobody waits for it,
// so a log that did not close cleanly is told to the operator.
func (s *sess) evict() {
	if err := s.closeLogs(); err != nil {
		s.e.cfg.Log.Error("session closed: a log was not sealed; the journal keeps its appends for the next start", "session", s.rel, "err", err)
	}
}

func newSess(e *Engine, r layout.Ref) *sess {
	return &sess{e: e, ref: r, clients: map[string]*clientRecord{}, active: map[string]*run{}, slots: make(chan struct{}, runSlots), present: map[string]bool{}}
}

// createTemp makes the temp session r of uid unless it exists: EAGAIN
// when uid holds all it may (tempSessions).
func (e *Engine) createTemp(r layout.Ref, uid uint32, cwd string) error {
	return e.temps.add(r.Key(), uid, func() *sess {
		s := newSess(e, r)
		s.scope, s.cwd = abi.ScopeTemp, cwd
		s.msgs, s.events = sealedlog.NewMemory(), sealedlog.NewMemory()
		return s
	})
}

// load reads a session directory: opens and verifies its logs, learns
// its client ids, and closes runs that a crash interrupted. Something
// other than a directory at the session's place is refused (EIO).
func (e *Engine) load(r layout.Ref) (*sess, error) {
	rel := r.Rel()
	st, err := e.root.Lstat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, notFound("session", r.Name)
	case err != nil:
		return nil, err
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return nil, &storefs.UnsafeError{Op: "session", Path: e.root.Show(rel), What: storefs.TypeName(st.Mode) + ", not a directory"}
	}
	e.Index(r.Container) // loading the container's index clears its leftovers
	e.root.RemoveTemps(rel, nil)
	s := newSess(e, r)
	s.rel = rel
	perm := os.FileMode(st.Mode).Perm()
	s.own = layout.HistoryOwner(storefs.Owner{Uid: int(st.Uid), Gid: int(st.Gid), DirMode: perm, FileMode: perm &^ 0o111})
	s.scope = scopeOfHome(r.Home)
	s.updatedAt = e.readUnix(s.file(abi.FileUpdatedAt))
	s.cwd, _ = e.readValue(s.file(abi.FileCwd))
	identity, problem := layout.ReadIdentity(e.root, rel)
	if s.events, err = sealedlog.Open(e.logPlace(rel, abi.FileEvents, identity)); err != nil {
		return nil, err
	}
	if s.msgs, err = sealedlog.Open(e.logPlace(rel, abi.FileMessages, identity)); err != nil {
		s.events.Close()
		return nil, err
	}
	// Every append from now on is charged to the home (EDQUOT
	// past its bound on history, nothing written).
	s.events.SetCharge(e.historyCharge(r.Home))
	s.msgs.SetCharge(e.historyCharge(r.Home))
	if problem != "" {
		s.events.Refuse(problem)
		s.msgs.Refuse(problem)
	}
	e.refuseHeld(s, rel, identity)
	if s.provable() != nil {
		return s, nil // kept for reading and for refusing with EIO
	}
	unfinished, last, err := s.rebuildClients()
	if err != nil {
		return nil, err
	}
	s.reconcile(last)
	for _, rec := range unfinished {
		if !s.keepWaiting(rec) {
			s.closeInterruptedRun(rec)
		}
	}
	return s, nil
}

// createDir makes the session directory with its initial layout in a
// hidden temporary directory beside it, then renames it into place with
// storefs.Move (never over anything), so a crash never leaves a half-made session.
func (e *Engine) createDir(r layout.Ref, own storefs.Owner, cwd string) error {
	_, err := e.createFilled(r, own, filled{cwd: cwd})
	return err
}

// filled is what a new session starts with: its cwd, and for a session
// made whole (CreateImported) its logs' lines, latest.md and the fields
// meta.json holds beyond client and scope.
type filled struct {
	cwd    string
	logs   map[string][]byte // by file name
	latest string
	meta   *proto.Object
	// entry: the session comes with an index entry (an import's
	// by-uuid), whose name is reserved with the session's, so that one
	// that would not fit refuses the session before anything is made;
	// once made, the caller sets it with index.SetEntryReserved.
	entry bool
	// held: names the caller took for the session and its entry
	// (roomFor) before it made anything for it; passed to createFilled.
	held *heldNames
}

// createFilled is createDir for a session that starts with f. made says
// the session was moved into place (its error then is a late one, the
// directory's sync).
func (e *Engine) createFilled(r layout.Ref, own storefs.Owner, f filled) (made bool, err error) {
	// The names the caller took for it (roomFor) are this one's now:
	// given back unless the session was made.
	held := f.held.pass()
	defer func() {
		if !made && held > 0 {
			e.limits.Names.Give(r.Home, held)
		}
	}()
	// Its logs' lines (an import's) and its meta.json are history the
	// home keeps: charged before anything is made (EDQUOT past the
	// bound), given back unless the session was made.
	undo, err := e.takeHistory(r.Home, createdSize(r.Home, f))
	if err != nil {
		return false, &abi.Error{Op: "create session", Path: r.Name, Errno: abi.Errno(err), Msg: abi.Message(err)}
	}
	defer func() {
		if !made {
			undo()
		}
	}()
	container := r.Container.Rel()
	mk := func() error { return layout.MkdirAll(e.root, container, own) }
	if err := e.makeAgent(r.Home, path.Dir(container), mk); err != nil {
		return false, err
	}
	x, err := e.Index(r.Container)
	if err != nil {
		return false, err
	}
	// The session is one name more its container's home keeps (EDQUOT
	// past the bound, before anything is made), its entry another, those
	// the caller did not hold charged here; given back unless it was made.
	names, reserved := int64(1), held
	if f.entry {
		names++
	}
	defer func() {
		for ; !made && reserved > held; reserved-- {
			x.Unreserve()
		}
	}()
	for ; reserved < names; reserved++ {
		if err := x.Reserve(); err != nil {
			return false, &abi.Error{Op: "create session", Path: r.Name, Errno: abi.Errno(err), Msg: abi.Message(err)}
		}
	}
	tmp, err := e.root.MkdirTemp(container, layout.NewDirPrefix+r.Name+"-", layout.HistoryOwner(own).DirMode)
	if err != nil {
		return false, err
	}
	defer e.root.RemoveAll(tmp)
	if err := e.layout(tmp, r.Rel(), own, scopeOfHome(r.Home), f); err != nil {
		return false, err
	}
	if err := e.root.Move(tmp, r.Rel()); err != nil {
		return false, &abi.Error{Op: "create session", Path: r.Name, Errno: abi.Errno(err)}
	}
	return true, e.root.SyncDir(container)
}

// layout writes a new session's files into tmp (SPEC section 5), a hidden
// directory that createDir renames into place (final) afterwards, so the
// files need no atomic replacement, only to be durable before the rename;
// they are written and synced in parallel (a file creation costs
// milliseconds on this kind of machine, and concurrent syncs share journal
// commits). The identity names final, where the session will be.
func (e *Engine) layout(tmp, final string, free storefs.Owner, scope string, start filled) error {
	own := layout.HistoryOwner(free) // all but context/, the session's free tree
	if err := e.root.ChownOwned(tmp, own); err != nil {
		return err
	}
	for d, o := range map[string]storefs.Owner{abi.DirContext: free, layout.SealDir: own} {
		if err := e.root.MkdirOwned(tmp+"/"+d, o); err != nil {
			return err
		}
	}
	identity, err := layout.NewIdentity(final)
	if err != nil {
		return err
	}
	if err := layout.WriteNew(e.root, layout.SealRel(tmp, layout.IdentityFile), identity, own); err != nil {
		return err
	}
	now := strconv.FormatInt(time.Now().Unix(), 10) + "\n"
	meta := newMeta(scope, start)
	values := map[string]string{
		abi.FileLatest: start.latest, abi.FileState: abi.StateIdle + "\n", abi.FileCwd: start.cwd + "\n",
		abi.FileCreatedAt: now, abi.FileUpdatedAt: now, abi.FileMeta: string(meta.Line()),
	}
	var jobs []func() error
	for _, f := range layout.SessionLogs {
		jobs = append(jobs, func() error {
			l, err := sealedlog.CreateWith(layout.LogPlace(e.root, e.sealKey, tmp, f, identity), own, start.logs[f])
			if err == nil {
				l.Close()
			}
			return err
		})
	}
	for name, v := range values {
		jobs = append(jobs, func() error { return layout.WriteNew(e.root, tmp+"/"+name, []byte(v), own) })
	}
	if err := parallel(jobs); err != nil {
		return err
	}
	return e.root.SyncDir(tmp)
}

// createdSize is the history a new session of home made with f keeps:
// its logs' lines and its meta.json.
func createdSize(home string, f filled) int64 {
	return int64(len(f.logs[abi.FileMessages]) + len(f.logs[abi.FileEvents]) + len(newMeta(scopeOfHome(home), f).Line()))
}

// newMeta is the meta.json a new session of scope starts with.
func newMeta(scope string, start filled) *proto.Object {
	meta := proto.NewObject("client", "ctx", "scope", scope)
	if start.meta != nil {
		for _, f := range start.meta.Fields {
			meta.Set(f.Key, f.Value)
		}
	}
	return meta
}

// parallel runs jobs at once and returns the first error.
func parallel(jobs []func() error) error {
	errs := make(chan error, len(jobs))
	for _, job := range jobs {
		go func() { errs <- job() }()
	}
	var first error
	for range jobs {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Index returns the index of a container, loading it on first use. What
// it makes belongs to the container's owner, with the modes of its home:
// 0700/0600 in a private home; in a shared space the space's group and
// group access (0770/0660), so every member reads and writes it.
func (e *Engine) Index(ct layout.Container) (*index.Index, error) {
	if !ct.Valid() || ct.Home == "" {
		return nil, abi.Errorf(syscall.EINVAL, "index", "invalid container %+v", ct)
	}
	rel := ct.Rel()
	if x, ok := e.indexes.Peek(rel); ok {
		return x, nil // kept for good once loaded: no hold to take (every append asks)
	}
	x, release, err := e.indexes.Acquire(rel, func() (*index.Index, error) {
		st, err := e.root.Lstat(rel)
		if err != nil {
			return nil, &abi.Error{Op: "index", Path: e.root.Show(rel), Errno: abi.Errno(err), Msg: layout.ErrWords(err)}
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return nil, &storefs.UnsafeError{Op: "index", Path: e.root.Show(rel), What: storefs.TypeName(st.Mode) + ", not a directory"}
		}
		// No session of this container is being created before its index
		// is loaded (createDir loads it first), so what is half built
		// here is what a crash left.
		e.root.RemoveTemps(rel, layout.IsNewDir)
		own := layout.PrivateOwner(st.Uid, st.Gid)
		if space, ok := strings.CutPrefix(ct.Home, "shared/"); ok {
			sp, err := e.spaceStat(space)
			if err != nil {
				return nil, err
			}
			own = layout.SharedOwner(st.Uid, sp.Gid)
		}
		x, err := index.Load(e.root, rel, layout.HistoryOwner(own))
		if err == nil {
			x.OnChange(e.changed) // list, current and entries, as they change
			x.UseValues(e.wal)    // current and entries: durable through the journal
			e.countNames(x, ct)   // charged to the home or space
			// Load may have made the index directory: a name in the
			// container. Later announcements of the index directory
			// (touch) are of its content only, and leave the
			// container's attributes alone (fs/notify.go).
			e.changed(rel)
		}
		return x, err
	})
	if err != nil {
		return nil, err
	}
	release() // indexes hold no descriptor and are kept for good
	return x, nil
}

// sessionExists reports whether r names an existing session directory.
func (e *Engine) sessionExists(r layout.Ref) bool {
	if r.Temp {
		return e.temps.has(r.Key())
	}
	return e.isDir(r.Rel())
}

// definition loads the agent or model a container belongs to: read again
// only when it changed (def.Cache). The definition is shared.
func (e *Engine) definition(ct layout.Container) (*def.Definition, error) {
	defn, err := e.defs.Load(e.cfg.Root, ct.Kind, ct.Owner)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", ct.Kind, ct.Owner, err)
	}
	return defn, nil
}

// logPlace is where a session's log is, journaled by the engine.
func (e *Engine) logPlace(sessionRel, file string, identity []byte) sealedlog.Place {
	at := layout.LogPlace(e.root, e.sealKey, sessionRel, file, identity)
	at.Journal = e.wal
	return at
}

// openWAL replays what a previous server left in the journal (a damaged
// journal refuses the start: fsck --repair says what is lost) and starts a
// new one.
func (e *Engine) openWAL() error {
	var err error
	jc := e.cfg.Journal
	jc.Token, jc.Gate = e.cfg.Token, e.cfg.Gate // the engine's: Journal's own are not used
	e.wal, err = sealedlog.OpenJournal(e.admin, layout.JournalDir, layout.LocateLog(e.admin, e.sealKey), jc)
	return err
}

// refuseHeld makes a log unprovable while the journal's records for it are
// kept aside (a start could not recover it: sealedlog.Held): appending
// past them would build on bytes the journal says are not the log's end.
func (e *Engine) refuseHeld(s *sess, rel string, identity []byte) {
	for file, l := range map[string]*sealedlog.Log{abi.FileEvents: s.events, abi.FileMessages: s.msgs} {
		if sealedlog.Held(e.admin, layout.JournalDir, layout.LogPlace(e.admin, e.sealKey, rel, file, identity)) {
			l.Refuse(sealedlog.HeldWords)
		}
	}
}
