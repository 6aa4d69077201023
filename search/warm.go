package search

import (
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/storefs"
)

// What a query found in a session's index is kept for the next query
// (the segments' headers, their files mapped, the log's length and
// identity) for as long as the kernel reports no change to any file it
// was found from: one inotify instance watches each container's session
// directory and index directory, and each remembered session's
// directory, log, index directory and segment files. A query then costs
// no system call per unchanged session; it reads the queued events
// first, and every event forgets what it touches (a write, a truncation,
// a rename, a new link, a file made or removed there; a lost event, the
// queue overflowing, forgets everything). A query trusts nothing it
// remembers unless the container's two directories are still the ones
// watched (a directory cannot be linked twice, so the same directory
// holds the same names, each watched). Nothing is remembered from a query
// that wrote or dropped a segment, nor when an event came for the session
// while it was checked: the next query checks again.
//
// Bounds: at most maxWarmMaps segment files mapped (page cache, shared
// with the kernel's; the index is on disk either way) and maxWarmWatches
// watches; past either, everything is forgotten and the watches dropped.
const (
	maxWarmMaps    = 16384
	maxWarmWatches = 32768
	warmMask       = unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CLOSE_WRITE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
		unix.IN_CREATE | unix.IN_DELETE | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF
	warmSelf = unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_IGNORED | unix.IN_UNMOUNT
)

// fileID is a file whatever its contents.
type fileID struct{ dev, ino uint64 }

func idOf(st *unix.Stat_t) fileID { return fileID{st.Dev, st.Ino} }

// warmSegment is one segment file as a query found it to fit: its header
// and its bytes, mapped.
type warmSegment struct {
	h Header
	b []byte
}

// warmSession is what a query found of one session.
type warmSession struct {
	log   fileID // messages.jsonl
	size  int64  // its size when checked
	read  int64  // how much of it the check read (a loaded session's committed length may be less)
	segs  []warmSegment
	refs  int  // queries probing segs
	dead  bool // forgotten: unmapped once refs is 0
	maped int  // how many of segs are mapped
}

// warmContainer is one container's sessions as remembered.
type warmContainer struct {
	dir, index fileID // its session directory and its index directory, as watched
	sessions   map[string]*warmSession
	touched    map[string]uint64 // the event count when a name was last forgotten
	cleared    uint64            // touched was emptied at this count
	names      []string          // the session directory's listing, nil when not known
	dirSeq     uint64            // the event count at the last event in the session directory
	tidy       bool              // the index directory holds only the listed sessions' indexes
	indexSeq   uint64            // the event count at the last event in the index directory
}

// warmOwner is what a watch is for: a session (its directory, log,
// index directory or segment), or one of its container's two directories
// (whose events name the session).
type warmOwner struct {
	ct   *warmContainer
	name string // the session; ownDir or ownIndex: the container's directories
}

const (
	ownDir   = ""  // the container's session directory
	ownIndex = "/" // the container's index directory (no session is named so)
)

// warmWatch is the server's one watcher.
type warmWatch struct {
	mu         sync.Mutex
	fd         int // -1: none open (yet, or inotify unavailable)
	failed     bool
	seq        uint64 // events read
	owners     map[int32]map[warmOwner]struct{}
	containers map[warmKey]*warmContainer
	maps       int
	buf        []byte
}

var warm = &warmWatch{fd: -1}

// open makes the inotify instance; false when there is none.
func (w *warmWatch) open() bool {
	if w.fd >= 0 {
		return true
	}
	if w.failed {
		return false
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		w.failed = true
		return false
	}
	w.fd, w.owners, w.containers = fd, map[int32]map[warmOwner]struct{}{}, map[warmKey]*warmContainer{}
	w.buf = make([]byte, 64<<10)
	return true
}

// reset forgets everything and drops every watch (w.mu held).
func (w *warmWatch) reset() {
	for _, ct := range w.containers {
		w.dropContainer(ct)
	}
	if w.fd >= 0 {
		unix.Close(w.fd)
	}
	w.fd, w.owners, w.containers = -1, nil, nil
	w.seq++
}

// drain reads the queued events and forgets what they touch (w.mu held).
func (w *warmWatch) drain() {
	for w.fd >= 0 {
		n, err := unix.Read(w.fd, w.buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			if err != unix.EAGAIN {
				w.reset()
			}
			return
		}
		for b := w.buf[:n]; len(b) >= unix.SizeofInotifyEvent; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
			size := min(unix.SizeofInotifyEvent+int(ev.Len), len(b))
			name := b[unix.SizeofInotifyEvent:size]
			for i, c := range name {
				if c == 0 {
					name = name[:i]
					break
				}
			}
			b = b[size:]
			w.seq++
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				w.reset()
				return
			}
			w.event(ev.Wd, ev.Mask, string(name))
		}
	}
}

// event forgets what one event touches.
func (w *warmWatch) event(wd int32, mask uint32, name string) {
	for o := range w.owners[wd] {
		switch {
		case o.name != ownDir && o.name != ownIndex:
			w.forget(o.ct, o.name)
			continue
		case mask&warmSelf != 0:
			w.dropContainer(o.ct)
			continue
		case o.name == ownDir:
			o.ct.names, o.ct.dirSeq = nil, w.seq
		}
		o.ct.tidy, o.ct.indexSeq = false, w.seq
		if name != "" {
			w.forget(o.ct, name)
		}
	}
	if mask&unix.IN_IGNORED != 0 {
		delete(w.owners, wd)
	}
}

// forget drops what is remembered of session name (w.mu held).
func (w *warmWatch) forget(ct *warmContainer, name string) {
	if s := ct.sessions[name]; s != nil {
		delete(ct.sessions, name)
		w.release(s)
	}
	if len(ct.touched) >= 4096 {
		ct.touched, ct.cleared = map[string]uint64{}, w.seq
	}
	ct.touched[name] = w.seq
}

// dropContainer forgets a container and all its sessions (w.mu held).
func (w *warmWatch) dropContainer(ct *warmContainer) {
	for name, s := range ct.sessions {
		delete(ct.sessions, name)
		w.release(s)
	}
	ct.cleared = w.seq + 1
	for k, c := range w.containers {
		if c == ct {
			delete(w.containers, k)
		}
	}
}

// release marks s forgotten and unmaps its segments once no query
// probes them (w.mu held).
func (w *warmWatch) release(s *warmSession) {
	s.dead = true
	if s.refs == 0 {
		w.unmap(s)
	}
}

func (w *warmWatch) unmap(s *warmSession) {
	for _, sg := range s.segs {
		if sg.b != nil {
			unix.Munmap(sg.b)
		}
	}
	w.maps -= s.maped
	s.segs, s.maped = nil, 0
}

// watch adds a watch on the file f is open on, for o (w.mu held).
// Past maxWarmWatches everything is forgotten first.
func (w *warmWatch) watch(f *os.File, o warmOwner) bool {
	if w.fd < 0 {
		return false
	}
	if len(w.owners) >= maxWarmWatches {
		w.reset()
		return false
	}
	wd, err := unix.InotifyAddWatch(w.fd, "/proc/self/fd/"+strconv.Itoa(int(f.Fd())), warmMask)
	if err != nil {
		return false
	}
	set := w.owners[int32(wd)]
	if set == nil {
		set = map[warmOwner]struct{}{}
		w.owners[int32(wd)] = set
	}
	set[o] = struct{}{}
	return true
}

// warmKey is a container by its index directory in one store as one
// engine opened it: an engine opened again (a host that writes the store
// again after another host did, whose changes no local event reported)
// remembers nothing of an earlier one's.
type warmKey struct {
	root  *storefs.Root
	index string
}

// warmView is one query's view of a container's remembered sessions.
type warmView struct {
	ct  *warmContainer
	key warmKey
}

// warmBegin reads the queued events and returns the container's
// remembered sessions, watching its two directories (dir, its session
// directory; index, its index directory) if not watched yet. nil when
// nothing can be remembered (no inotify, a directory missing).
func warmBegin(root *storefs.Root, dir, index string) *warmView {
	d, err := root.OpenDir(dir)
	if err != nil {
		return nil
	}
	defer d.Close()
	x, err := root.OpenDir(index)
	if err != nil {
		return nil
	}
	defer x.Close()
	var sd, sx unix.Stat_t
	if unix.Fstat(int(d.Fd()), &sd) != nil || unix.Fstat(int(x.Fd()), &sx) != nil {
		return nil
	}
	w := warm
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.open() {
		return nil
	}
	w.drain()
	if w.fd < 0 && !w.open() {
		return nil
	}
	key := warmKey{root, index}
	ct := w.containers[key]
	if ct != nil && ct.dir == idOf(&sd) && ct.index == idOf(&sx) {
		return &warmView{ct: ct, key: key}
	}
	if ct != nil {
		w.dropContainer(ct)
	}
	ct = &warmContainer{dir: idOf(&sd), index: idOf(&sx), sessions: map[string]*warmSession{}, touched: map[string]uint64{}, cleared: w.seq}
	if !w.watch(d, warmOwner{ct, ownDir}) || !w.watch(x, warmOwner{ct, ownIndex}) {
		return nil
	}
	w.containers[key] = ct
	return &warmView{ct: ct, key: key}
}

// list is the container's sessions as list gives them, remembered while
// no event comes from its session directory.
func (v *warmView) list(list func() []string) []string {
	if v == nil {
		return list()
	}
	w := warm
	w.mu.Lock()
	names, seq := v.ct.names, w.seq
	w.mu.Unlock()
	if names != nil {
		return names
	}
	names = list()
	if names == nil {
		names = []string{}
	}
	w.mu.Lock()
	if v.ct.dirSeq <= seq && w.containers[v.key] == v.ct {
		w.drain()
		if v.ct.dirSeq <= seq {
			v.ct.names = names
		}
	}
	w.mu.Unlock()
	return names
}

// tidy runs drop (which removes the indexes of sessions gone) unless it
// ran since the last change to either of the container's directories.
func (v *warmView) tidy(drop func()) {
	if v == nil {
		drop()
		return
	}
	w := warm
	w.mu.Lock()
	done, seq := v.ct.tidy, w.seq
	w.mu.Unlock()
	if done {
		return
	}
	drop()
	w.mu.Lock()
	w.drain()
	if v.ct.indexSeq <= seq && w.containers[v.key] == v.ct {
		v.ct.tidy = true
	}
	w.mu.Unlock()
}

// lookup answers for session name from memory: the ranges of its log
// that may hold keys, and the log's identity and length checked. ok is
// false when nothing is remembered for it (or a remembered file was cut
// under its mapping). committed is the log's length a loaded session
// has committed (ok false: not loaded).
func (v *warmView) lookup(name string, keys []uint64, committed int64, loaded bool) (spans []Span, log fileID, read int64, ok bool) {
	w := warm
	w.mu.Lock()
	s := v.ct.sessions[name]
	if s == nil || s.dead {
		w.mu.Unlock()
		return nil, log, 0, false
	}
	size := s.size
	if loaded {
		size = min(size, committed)
	}
	if size != s.read {
		w.mu.Unlock()
		return nil, log, 0, false
	}
	s.refs++
	w.mu.Unlock()
	spans, ok = probeMapped(s.segs, keys)
	if ok {
		remembered.Add(1)
	}
	w.mu.Lock()
	s.refs--
	if !ok {
		w.forget(v.ct, name)
	}
	if s.dead && s.refs == 0 {
		w.unmap(s)
	}
	w.mu.Unlock()
	return spans, s.log, s.read, ok
}

var remembered atomic.Uint64

// Remembered is how many times a session was answered from memory
// (tests and benchmarks read it).
func Remembered() uint64 { return remembered.Load() }

// probeMapped probes mapped segments. A file cut under its mapping
// faults: that is not a panic of the server but a session checked again.
func probeMapped(segs []warmSegment, keys []uint64) (spans []Span, ok bool) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if recover() != nil {
			spans, ok = nil, false
		}
	}()
	for _, sg := range segs {
		if sg.h.probeBytes(sg.b, keys) {
			spans = append(spans, Span{sg.h.Start, sg.h.End})
		}
	}
	return spans, true
}

// warmCheck is one session's check as it goes, to be remembered if
// nothing changed meanwhile.
type warmCheck struct {
	v    *warmView
	name string
	seq  uint64 // events read when it began
	ok   bool   // every file it read is watched
	s    warmSession
}

// check begins a session's check: its directory and its index
// directory are watched first, so that any change after is an event.
func (v *warmView) check(root *storefs.Root, sessionDir, indexDir, name string) *warmCheck {
	c := &warmCheck{v: v, name: name, ok: true}
	w := warm
	w.mu.Lock()
	c.seq = w.seq
	w.mu.Unlock()
	c.ok = c.watchDir(root, sessionDir) && c.watchDir(root, indexDir)
	return c
}

func (c *warmCheck) watchDir(root *storefs.Root, rel string) bool {
	d, err := root.OpenDir(rel)
	if err != nil {
		return false
	}
	defer d.Close()
	return c.watch(d)
}

// watch watches the file f is open on for this session.
func (c *warmCheck) watch(f *os.File) bool {
	if c == nil || !c.ok {
		return false
	}
	w := warm
	w.mu.Lock()
	defer w.mu.Unlock()
	c.ok = w.watch(f, warmOwner{ct: c.v.ct, name: c.name})
	return c.ok
}

// watchLog watches the log (open as log.F) and checks that it is still
// the file and size log was opened at.
func (c *warmCheck) watchLog(log *Log) {
	if !c.watch(log.F) {
		return
	}
	var st unix.Stat_t
	v, known := VersionOf(log.Info)
	if !known || unix.Fstat(int(log.F.Fd()), &st) != nil ||
		(FileVersion{st.Dev, st.Ino, st.Size, st.Mtim.Nano(), st.Ctim.Nano()}) != v {
		c.ok = false
		return
	}
	c.s.log, c.s.size, c.s.read = idOf(&st), st.Size, log.Size
}

// segment notes a segment file found to fit and probed: mapped, to be
// probed from memory next time.
func (c *warmCheck) segment(f *os.File, h Header) {
	if c == nil || !c.ok {
		return
	}
	size := HeaderSize + h.Blocks*blockBytes
	b, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		c.ok = false
		return
	}
	c.s.segs = append(c.s.segs, warmSegment{h: h, b: b})
	c.s.maped++
}

// done remembers the check when clean is true (the index was up to date:
// nothing written, nothing dropped) and no event came for the session
// since it began; else it drops what it mapped.
func (c *warmCheck) done(clean bool) {
	if c == nil {
		return
	}
	w := warm
	w.mu.Lock()
	defer w.mu.Unlock()
	s := &c.s
	w.maps += s.maped
	if !clean || !c.ok || w.fd < 0 {
		w.unmap(s)
		return
	}
	w.drain()
	ct := c.v.ct
	if w.containers[c.v.key] != ct || ct.cleared > c.seq || ct.touched[c.name] > c.seq {
		w.unmap(s)
		return
	}
	if w.maps > maxWarmMaps {
		w.unmap(s)
		w.reset()
		return
	}
	if old := ct.sessions[c.name]; old != nil {
		w.release(old)
	}
	ct.sessions[c.name] = s
}
