package index

import (
	"bytes"
	"container/list"
	"path"
	"sort"
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
	flushErr  error // the last failure to write the snapshot, until one succeeds
	problems  []error

	kick chan struct{} // wakes the flusher; buffered 1, so sends never block
	stop chan struct{}
	done chan struct{}
}

// Load opens the index of container (relative to root), creating index/
// and its subdirectories if missing, with own's owner and modes. The
// container itself must exist (ENOENT otherwise): its owner and mode are
// not the index's to choose.
//
// The order of List is rebuilt from the sessions' updated_at mtimes. Entry
// and current files are validated: garbage (bad key, bad value, not a
// regular file) is left in place but not served, and entries naming a
// session that no longer exists (an archive interrupted before Remove) are
// deleted; both are reported by Problems.
func Load(root *storefs.Root, container string, own storefs.Owner) (*Index, error) {
	x := &Index{
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
	if err := x.makeDirs(); err != nil {
		return nil, err
	}
	x.removeTemps()
	names, err := x.scanSessions()
	if err != nil {
		return nil, err
	}
	exists := make(map[string]bool, len(names))
	for _, n := range names {
		exists[n] = true
		x.pos[n] = x.order.PushBack(n)
	}
	x.loadCurrent(exists)
	for _, k := range abi.IndexKinds {
		if err := x.loadEntries(k, exists); err != nil {
			return nil, err
		}
	}
	x.checkSnapshot()
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

// scanSessions lists the container's session directories, newest updated_at
// mtime first, ties by name; sessions without updated_at go last, by name.
func (x *Index) scanSessions() ([]string, error) {
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
	sort.Slice(ss, func(i, j int) bool { return newer(ss[i], ss[j]) })
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = s.name
	}
	return names, nil
}

// newer orders sessions for List.
func newer(a, b session) bool {
	if a.has != b.has {
		return a.has
	}
	if a.has && a.mtime != b.mtime {
		return a.mtime > b.mtime
	}
	return a.name < b.name
}

// loadCurrent reads index/current; a value naming no session is removed.
func (x *Index) loadCurrent(exists map[string]bool) {
	p := path.Join(x.idx, currentFile)
	name, ok, err := x.readValue(p)
	switch {
	case err != nil:
		x.problem(p, err)
	case !ok:
	case !exists[name]:
		x.dropDangling(p, name)
	default:
		x.current = name
	}
}

// loadEntries reads one entry directory.
func (x *Index) loadEntries(kind string, exists map[string]bool) error {
	d := path.Join(x.idx, kind)
	ents, err := x.root.ReadDir(d)
	if err != nil {
		return x.err("load", d, err)
	}
	for _, e := range ents {
		key, p := e.Name, path.Join(d, e.Name)
		if storefs.IsReplaceTemp(key) {
			x.root.Remove(p) // what an interrupted replace left: nobody relies on it
			continue
		}
		if key[0] == '.' {
			continue // never a valid key
		}
		if !abi.ValidIndexKey(kind, key) {
			x.problem(p, abi.Errorf(syscall.EINVAL, "", "invalid %s key", kind))
			continue
		}
		name, ok, err := x.readValue(p)
		switch {
		case err != nil:
			x.problem(p, err)
		case !ok:
		case !exists[name]:
			x.dropDangling(p, name)
		default:
			x.setEntryLocked(kind, key, name)
		}
	}
	return nil
}

// checkSnapshot schedules a write of index/list unless the file already
// holds the rebuilt order (a clean restart then writes nothing).
func (x *Index) checkSnapshot() {
	want := x.listBytesLocked()
	old, err := x.root.ReadFile(path.Join(x.idx, listFile), int64(len(want)))
	if err != nil || !bytes.Equal(old, want) {
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
// unreadable or invalid files (left in place for a person to look at) and
// entries naming missing sessions (removed). Each is an *abi.Error with Path.
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
		return nil
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
