package index

import (
	"bytes"
	"container/list"
	"errors"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"golang.org/x/sys/unix"
)

// Names inside index/.
const (
	dirName     = "index"
	currentFile = "current"
	listFile    = "list"
)

// flushEvery bounds how often the list snapshot is rewritten: the file is
// O(sessions) bytes, so writing it on every send would make sends slower as
// sessions accumulate.
const flushEvery = time.Second

// ref names one entry file: kind and key.
type ref struct{ kind, key string }

// Index is the index of one container. All methods are safe for concurrent
// use.
//
// Locking: wmu serializes mutators for the whole of their disk writes, so the
// store and memory change in the same order; mu guards the memory and is held
// only briefly, so readers (List, Current, Lookup) never wait for an fsync.
// A goroutine holding wmu may read the memory without mu, because every
// writer of it holds wmu.
type Index struct {
	root *storefs.Root // every file access goes through it
	dir  string        // the container, relative to the store
	idx  string        // <container>/index
	own  storefs.Owner // owner and modes of what the index makes

	wmu sync.Mutex

	mu        sync.RWMutex
	order     *list.List               // session names, front = newest
	pos       map[string]*list.Element // name → its element in order
	current   string                   // "" when none
	entries   map[string]map[string]string
	refs      map[string]map[ref]struct{} // name → entries whose value is name
	gen       uint64                      // bumped on every change of order
	listCache []byte                      // ListBytes of gen cacheGen; nil when stale
	cacheGen  uint64
	dirty     bool // order changed since the snapshot was last written
	closed    bool
	view      bool    // View: the store's files as they are, never changed
	pending   Pending // ViewPending: laid over the store's value files at load
	flushErr  error   // the last failure to write the snapshot, until one succeeds
	problems  []error

	kick chan struct{} // wakes the flusher; buffered 1, so sends never block

	values Values // nil: value files are replaced and synced here (UseValues); read under wmu
	stop   chan struct{}
	done   chan struct{}

	// onChange is told the store path of every file of the index whose
	// content changes (list, current, an entry), after the change and
	// before the mutator returns; set by OnChange, read under wmu.
	onChange func(rels ...string)

	// take and give charge and give back the names the index keeps
	// (sessions and entries) to its container's home (CountNames; nil:
	// not counted); read under wmu.
	take func(n int64) error
	give func(n int64)
}

// CountNames has every name the index comes to keep charged with take
// before anything of it is written (a refusal is the mutator's error,
// and nothing changes), and every name it drops given back with give:
// the per-home bound of quota.Names. A session is charged by Reserve,
// before its directory is made; the names Load found are the count's.
func (x *Index) CountNames(take func(n int64) error, give func(n int64)) {
	x.wmu.Lock()
	x.take, x.give = take, give
	x.wmu.Unlock()
}

// Names is how many names the index keeps: its sessions and entries.
func (x *Index) Names() int64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	n := len(x.pos)
	for _, es := range x.entries {
		n += len(es)
	}
	return int64(n)
}

// Reserve charges one session about to be made in the container (EDQUOT
// past its owner's bound); Unreserve gives it back when none was made.
func (x *Index) Reserve() error {
	x.wmu.Lock()
	defer x.wmu.Unlock()
	return x.charge(1)
}

// Unreserve gives back what Reserve charged for a session never made.
func (x *Index) Unreserve() {
	x.wmu.Lock()
	defer x.wmu.Unlock()
	x.uncharge(1)
}

// CheckNew refuses, as SetEntry would, an entry kind/key the index does
// not keep yet when its owner has no name left, charging nothing: a write
// through the mount is refused at once, not only at its close (shells
// ignore close errors).
func (x *Index) CheckNew(kind, key string) error {
	x.wmu.Lock()
	defer x.wmu.Unlock()
	if _, ok := x.entries[kind][key]; ok {
		return nil
	}
	if err := x.charge(1); err != nil {
		return err
	}
	x.uncharge(1)
	return nil
}

// charge takes n names for the index's owner. Caller holds wmu.
func (x *Index) charge(n int64) error {
	if x.take == nil {
		return nil
	}
	return x.take(n)
}

// uncharge gives back n names. Caller holds wmu.
func (x *Index) uncharge(n int64) {
	if x.give != nil {
		x.give(n)
	}
}

// OnChange registers fn to be told, synchronously, the path (relative to
// the store, as the tree shows it: "<container>/index/list",
// "<container>/index/by-cwd/<key>") of every file of the index whose
// content changed: the FUSE projection keeps the kernel's caches of these
// files exact with it, and a send must not be acknowledged before they
// are. fn is called with wmu held (mutators wait for it) and mu released
// (readers never do); it must not call back into the index's mutators.
func (x *Index) OnChange(fn func(rels ...string)) {
	x.wmu.Lock()
	x.onChange = fn
	x.wmu.Unlock()
}

// changed tells the OnChange function that the files at rels changed.
// Caller holds wmu.
func (x *Index) changed(rels ...string) {
	if x.onChange != nil {
		x.onChange(rels...)
	}
}

// Load opens the index of container (relative to root), creating index/
// and its subdirectories if missing, with own's owner and modes. The
// container itself must exist (ENOENT otherwise): its owner and mode are
// not the index's to choose.
//
// The order of List starts from the saved snapshot index/list when it can
// be trusted (see arrange): after a clean Close it is the order exactly.
// Entry and current files are validated: garbage (bad key, bad value, not a
// regular file) is left in place but not served, and entries naming a
// session that no longer exists (an archive interrupted before Remove) are
// deleted; both are reported by Problems, as is a snapshot not trusted.
func Load(root *storefs.Root, container string, own storefs.Owner) (*Index, error) {
	return loadIndex(root, container, own, false, nil)
}

// View loads the index of container as Load does and changes nothing in
// the store: for a follower serving a store another server writes (its
// root is read-only, storefs.ReadOnly). A missing index/ or entry
// directory is an empty one; a temporary left there stays; an entry
// naming a missing session is not served, and stays; nothing is written
// in the background. Every mutator fails with EROFS. The view is the
// store's files as they are: they lag the writer's memory (index/list by
// up to flushEvery, values until the writer's journal checkpoints them).
func View(root *storefs.Root, container string) (*Index, error) {
	return ViewPending(root, container, nil)
}

// Pending are the value files a running writer changed and has not
// written yet (its journal's value records, sealedlog.PendingValues), by
// store path: the content, or nil for a file removed.
type Pending map[string][]byte

// ViewPending is View with pending laid over the store's files: a value
// file pending is read from it (nil: removed), and an entry pending that
// its directory does not hold yet is an entry; the rest is the store's.
func ViewPending(root *storefs.Root, container string, pending Pending) (*Index, error) {
	return loadIndex(root, container, storefs.Owner{}, true, pending)
}

func loadIndex(root *storefs.Root, container string, own storefs.Owner, view bool, pending Pending) (*Index, error) {
	x := &Index{
		view:    view,
		pending: pending,
		root:    root,
		dir:     container,
		idx:     path.Join(container, dirName),
		own:     own,
		order:   list.New(),
		pos:     make(map[string]*list.Element),
		entries: make(map[string]map[string]string),
		refs:    make(map[string]map[ref]struct{}),
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	if !view {
		if err := x.makeDirs(); err != nil {
			return nil, err
		}
		x.root.RemoveTemps(x.idx, nil) // the entry directories are cleaned as they load
	}
	ss, err := x.scanSessions()
	if err != nil {
		return nil, err
	}
	exists := make(sessionSet, len(ss))
	for i, s := range ss {
		exists[s.name] = i
	}
	snap := x.readSnapshot(len(ss))
	for _, n := range arrange(ss, exists, snap, time.Now().UnixNano()) {
		x.pos[n] = x.order.PushBack(n)
	}
	x.loadCurrent(exists)
	for _, k := range abi.IndexKinds {
		if err := x.loadEntries(k, exists); err != nil {
			return nil, err
		}
	}
	if view {
		x.closed = true // nothing to flush, nothing may change (checkOpen)
		return x, nil
	}
	x.checkSnapshot(snap)
	go x.flusher()
	return x, nil
}

// makeDirs creates index/ and its entry directories.
func (x *Index) makeDirs() error {
	if err := x.mkdir(x.idx); err != nil {
		return err
	}
	for _, k := range abi.IndexKinds {
		if err := x.mkdir(path.Join(x.idx, k)); err != nil {
			return err
		}
	}
	return nil
}

// session is a session directory found at Load.
type session struct {
	name  string
	mtime int64 // updated_at mtime in ns
	has   bool  // updated_at exists
}

// scanSessions lists the container's session directories, in directory
// order, with their updated_at mtimes: the one stat of each that Load makes.
func (x *Index) scanSessions() ([]session, error) {
	ents, err := x.root.ReadDir(x.dir)
	if err != nil {
		return nil, x.err("load", x.dir, err)
	}
	var ss []session
	for _, e := range ents {
		// d_type from getdents: a symlink is not a session directory.
		if !e.IsDir() || !abi.ValidSessionName(e.Name) {
			continue
		}
		s := session{name: e.Name}
		st, err := x.root.Lstat(path.Join(x.dir, s.name, abi.FileUpdatedAt))
		if err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
			s.mtime, s.has = st.Mtim.Nano(), true
		}
		ss = append(ss, s)
	}
	return ss, nil
}

// arrange returns the order of List at Load, front first.
//
// Without a trusted snapshot it is the sessions' updated_at mtimes: newest
// first, ties by name, sessions without updated_at last (by name). Those
// mtimes change at most once a second (the engine rewrites updated_at only
// when its second changes), so they cannot order the sends of one second.
//
// With one, the snapshot's order is kept for every session it names that
// still exists and has not been touched since it was written (updated_at
// mtime not newer than the snapshot's own); the sessions it misses and
// those touched since go in front of them, ordered by mtime as above. After
// a clean Close no session is newer than the snapshot (Close rewrites it
// after any change of order, and a touch that changes nothing is a touch of
// the front session), so the order is the snapshot's exactly. After a crash
// the snapshot lags by up to about flushEvery, plus the sends whose second
// had already been written to updated_at: those keep their older place.
//
// An mtime later than now (Load's time) says only that the clock was
// stepped back since it was written, not that the session was touched
// after the snapshot: such a session keeps its place in the snapshot, so a
// clean restart stays exact after a clock correction.
func arrange(ss []session, exists sessionSet, snap *snapshot, now int64) []string {
	var kept []int // indexes in ss, in the snapshot's order
	inSnap := make([]bool, len(ss))
	if snap != nil {
		kept = make([]int, 0, len(snap.names))
		for _, n := range snap.names {
			i, ok := exists[n]
			if !ok {
				continue // gone since the snapshot was written
			}
			if s := ss[i]; s.has && s.mtime > snap.mtime && s.mtime <= now {
				continue // touched after it was written: to the front
			}
			inSnap[i] = true
			kept = append(kept, i)
		}
	}
	front := make([]session, 0, len(ss)-len(kept))
	for i, s := range ss {
		if !inSnap[i] {
			front = append(front, s)
		}
	}
	sort.Slice(front, func(i, j int) bool { return newer(front[i], front[j]) })
	names := make([]string, 0, len(ss))
	for _, s := range front {
		names = append(names, s.name)
	}
	for _, i := range kept {
		names = append(names, ss[i].name)
	}
	return names
}

// newer orders sessions by updated_at mtime for List.
func newer(a, b session) bool {
	if a.has != b.has {
		return a.has
	}
	if a.has && a.mtime != b.mtime {
		return a.mtime > b.mtime
	}
	return a.name < b.name
}

// sessionSet maps each session found at Load to its index in the scan.
type sessionSet map[string]int

func (s sessionSet) has(name string) bool {
	_, ok := s[name]
	return ok
}

// snapshot is index/list as read at Load, when trusted.
type snapshot struct {
	data  []byte   // the file's bytes
	names []string // its lines, front first
	mtime int64    // its mtime in ns
}

// maxSnapshotBytes bounds what is read of index/list in a container of n
// sessions: room for every session twice over (names of sessions gone
// since a crashed server wrote it, at most the longest name each) plus
// 1,024 more. A larger file is not one this index wrote for this store.
func maxSnapshotBytes(n int) int64 {
	return int64(abi.MaxNameLen+1) * (2*int64(n) + 1024)
}

// readSnapshot reads index/list, with its mtime from the same descriptor.
// nil when there is none or it is not trusted: not a regular file (never
// followed, never opened if it is a FIFO: storefs), unreadable, larger than
// maxSnapshotBytes, or not lines of distinct valid session names each
// ending in a newline. A file not trusted is reported in Problems.
func (x *Index) readSnapshot(sessions int) *snapshot {
	p := path.Join(x.idx, listFile)
	snap, err := x.readSnapshotFile(p, maxSnapshotBytes(sessions))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			e := x.err("load", p, err)
			e.Msg = "not trusted for the order of list: " + e.Msg
			x.problems = append(x.problems, e)
		}
		return nil
	}
	return snap
}

func (x *Index) readSnapshotFile(p string, limit int64) (*snapshot, error) {
	f, err := x.root.OpenFile(p, unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, err
	}
	if st.Size > limit {
		return nil, abi.Errorf(syscall.EFBIG, "", "%d bytes, more than %d", st.Size, limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, abi.Errorf(syscall.EFBIG, "", "more than %d bytes", limit)
	}
	names, err := parseList(data)
	if err != nil {
		return nil, err
	}
	return &snapshot{data: data, names: names, mtime: st.Mtim.Nano()}, nil
}

// parseList splits the content of index/list into its names: EINVAL for
// a line that is not a valid session name, a name listed twice, or a last
// line without its newline (the snapshot is replaced whole, so a torn
// file was not written by the index).
func parseList(data []byte) ([]string, error) {
	if len(data) == 0 {
		return nil, nil
	}
	if data[len(data)-1] != '\n' {
		return nil, abi.Errorf(syscall.EINVAL, "", "the last line has no newline")
	}
	lines := strings.Split(string(data[:len(data)-1]), "\n")
	seen := make(map[string]struct{}, len(lines))
	for i, n := range lines {
		if !abi.ValidSessionName(n) {
			return nil, abi.Errorf(syscall.EINVAL, "", "line %d: invalid session name %q", i+1, n)
		}
		if _, dup := seen[n]; dup {
			return nil, abi.Errorf(syscall.EINVAL, "", "line %d: %q is listed twice", i+1, n)
		}
		seen[n] = struct{}{}
	}
	return lines, nil
}

// loadCurrent reads index/current; a value naming no session is removed.
func (x *Index) loadCurrent(exists sessionSet) {
	x.loadValue(path.Join(x.idx, currentFile), exists, func(name string) { x.current = name })
}

// loadValue reads the value file p and hands it to use when it names a
// session that exists; one naming no session is removed, a problem noted.
func (x *Index) loadValue(p string, exists sessionSet, use func(name string)) {
	name, ok, err := x.readValue(p)
	switch {
	case err != nil:
		x.problem(p, err)
	case !ok:
	case !exists.has(name) && x.view:
		x.problem(p, abi.Errorf(syscall.ENOENT, "", "not served: session %q does not exist", name))
	case !exists.has(name):
		x.dropDangling(p, name)
	default:
		use(name)
	}
}

// loadEntries reads one entry directory.
func (x *Index) loadEntries(kind string, exists sessionSet) error {
	d := path.Join(x.idx, kind)
	ents, err := x.root.ReadDir(d)
	if x.view && errors.Is(err, fs.ErrNotExist) {
		ents, err = nil, nil // not made yet: no entries but those pending
	}
	if err != nil {
		return x.err("load", d, err)
	}
	for _, key := range x.pendingKeys(d, ents) {
		ents = append(ents, storefs.Entry{Name: key})
	}
	for _, e := range ents {
		key, p := e.Name, path.Join(d, e.Name)
		if storefs.IsReplaceTemp(key) {
			if !x.view {
				x.root.Remove(p) // what an interrupted replace left: nobody relies on it
			}
			continue
		}
		if key[0] == '.' {
			continue // never a valid key
		}
		if !abi.ValidIndexKey(kind, key) {
			x.problem(p, abi.Errorf(syscall.EINVAL, "", "invalid %s key", kind))
			continue
		}
		x.loadValue(p, exists, func(name string) { x.setEntryLocked(kind, key, name) })
	}
	return nil
}

// checkSnapshot schedules a write of index/list unless the trusted
// snapshot already holds the order Load arranged (a clean restart then
// writes nothing). The file is not read again: snap holds what was read.
func (x *Index) checkSnapshot(snap *snapshot) {
	if snap == nil || !bytes.Equal(snap.data, x.listBytesLocked()) {
		x.markDirtyLocked()
	}
}

// dropDangling removes a file whose value names a session that is gone:
// serving it would point callers at nothing, and keeping it would let it
// come back to life if a session of that name were created later.
func (x *Index) dropDangling(p, name string) {
	if err := x.removeFile(p); err != nil {
		x.problem(p, err)
		return
	}
	x.problem(p, abi.Errorf(syscall.ENOENT, "", "removed: session %q does not exist", name))
}

// problem records something wrong found in the store at Load.
func (x *Index) problem(p string, err error) {
	x.problems = append(x.problems, x.err("load", p, err))
}

// Problems returns what Load found wrong in the store and did not serve:
// unreadable or invalid files (left in place for a person to look at),
// entries naming missing sessions (removed) and a list snapshot not trusted
// for the order (replaced by the next write when it is a regular file). Each is an *abi.Error with Path.
func (x *Index) Problems() []error {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return append([]error(nil), x.problems...)
}

// Close writes the list snapshot if it changed and stops the background
// flusher. Mutators fail with EIO after Close; readers keep working.
func (x *Index) Close() error {
	x.wmu.Lock()
	defer x.wmu.Unlock()
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		return nil // closed before, or a View (no flusher)
	}
	x.closed = true
	x.mu.Unlock()
	close(x.stop)
	<-x.done
	return x.flushList()
}

// flusher writes the snapshot after a change, at most once per flushEvery:
// the first change after a quiet second is written at once, later ones are
// gathered into the next write.
func (x *Index) flusher() {
	defer close(x.done)
	var last time.Time
	for {
		select {
		case <-x.kick:
		case <-x.stop:
			return
		}
		if wait := flushEvery - time.Since(last); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-x.stop:
				t.Stop()
				return
			}
		}
		x.flushList()
		last = time.Now()
	}
}

// flushList writes index/list if the order changed since the last write.
// Only the flusher and, after it stopped, Close call it, so writes of the
// snapshot never overtake each other.
func (x *Index) flushList() error {
	x.mu.Lock()
	if !x.dirty {
		x.mu.Unlock()
		return nil
	}
	x.dirty = false
	data := x.listBytesLocked()
	x.mu.Unlock()
	err := x.root.ReplaceFile(path.Join(x.idx, listFile), data, x.own, storefs.NoSync)
	x.mu.Lock()
	defer x.mu.Unlock()
	x.flushErr = nil
	if err != nil {
		x.dirty = true // retried at the next change or at Close
		x.flushErr = x.err("write list", path.Join(x.idx, listFile), err)
	}
	return x.flushErr
}
