package index

import (
	"errors"
	"path"
	"slices"
	"sort"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"golang.org/x/sys/unix"
)

// List returns the session names, newest first.
func (x *Index) List() []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]string, 0, x.order.Len())
	for e := x.order.Front(); e != nil; e = e.Next() {
		out = append(out, e.Value.(string))
	}
	return out
}

// ListBytes returns the content of index/list: one name a line, newest
// first, empty for no sessions. It is always current, unlike the snapshot
// file in the store. The bytes are cached until the order changes, so
// repeated reads and stats of the file cost a copy, not a rebuild.
func (x *Index) ListBytes() []byte {
	x.mu.RLock()
	if x.listCache != nil && x.cacheGen == x.gen {
		b := append([]byte(nil), x.listCache...)
		x.mu.RUnlock()
		return b
	}
	x.mu.RUnlock()
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]byte(nil), x.listBytesLocked()...)
}

// listBytesLocked builds (or returns the cached) list content; mu held for
// writing.
func (x *Index) listBytesLocked() []byte {
	if x.listCache != nil && x.cacheGen == x.gen {
		return x.listCache
	}
	b := make([]byte, 0, x.order.Len()*16)
	for e := x.order.Front(); e != nil; e = e.Next() {
		b = append(b, e.Value.(string)...)
		b = append(b, '\n')
	}
	x.listCache, x.cacheGen = b, x.gen
	return b
}

// Current returns the current session name, "" when none.
func (x *Index) Current() string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.current
}

// Lookup returns the session an entry names. ENOENT when absent (a key that
// is malformed is simply absent: lookups through the mount must not fail
// differently for odd names); EINVAL for an unknown kind.
func (x *Index) Lookup(kind, key string) (string, error) {
	if !knownKind(kind) {
		return "", abi.Errorf(syscall.EINVAL, "lookup", "unknown index kind %q", kind)
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	name, ok := x.entries[kind][key]
	if !ok {
		return "", abi.Errorf(syscall.ENOENT, "lookup", "%s/%s", kind, key)
	}
	return name, nil
}

// Keys returns the keys of one kind, sorted (nil for an unknown kind).
func (x *Index) Keys(kind string) []string {
	x.mu.RLock()
	m := x.entries[kind]
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	x.mu.RUnlock()
	sort.Strings(keys)
	return keys
}

// Touch records a send (or any append) to session name: it moves name to the
// top of the list and, for a send (cwd != ""), sets current and writes
// by-cwd/<abi.CwdKey(cwd)>. EINVAL for a bad name or cwd, ENOENT when the
// session is neither listed nor an existing directory.
//
// With cwd == "" (an append through the mount, SPEC 5/6) only the list
// moves: current is what `ctx` commands fall back to, and SPEC 9 lets only a
// send or an explicit write move it, so a tool appending to a log of another
// session does not silently redirect the user's next command.
//
// The engine writes updated_at before calling Touch, so a session touched
// after the last snapshot was written is newer than it, and a Load after a
// crash puts it in front (see arrange). The list moves even if a file write
// fails: updated_at already says the session was touched.
func (x *Index) Touch(name, cwd string) error {
	const op = "touch"
	if err := checkName(op, name); err != nil {
		return err
	}
	if cwd != "" {
		if err := abi.CheckCwd(cwd); err != nil {
			return ioErr(op, "", err)
		}
	}
	return x.change(op, name, x.readyListed, func() error {
		x.toFront(name)
		if cwd == "" {
			return nil
		}
		// A by-cwd entry past its owner's bound of names is not made, and
		// the send still becomes current: the entry is a shortcut, and the
		// send it would record was taken.
		err := x.putEntry(op, abi.IndexByCwd, abi.CwdKey(cwd), name, storefs.SyncData, false)
		if err != nil && !errors.Is(err, syscall.EDQUOT) {
			return err
		}
		return errors.Join(err, x.putCurrent(op, name, storefs.SyncData))
	})
}

// Add puts a newly created session at the top of the list (it does not
// become current: creating is not sending). EINVAL for a bad name, ENOENT
// when its directory does not exist.
func (x *Index) Add(name string) error {
	return x.change("add", name, x.ready, func() error {
		x.toFront(name)
		return nil
	})
}

// Remove drops name from the list, every by-cwd/by-hash/by-uuid entry whose
// value is name, and current if it is name (archive and GC, SPEC 12). The
// session directory is expected to be gone already. Removing a name the
// index does not know is not an error; after a failure, calling Remove again
// finishes the job.
func (x *Index) Remove(name string) error {
	const op = "remove"
	return x.change(op, name, func(op, _ string) error { return x.checkOpen(op) }, func() error { return x.remove(op, name) })
}

// remove is Remove once the index is known open; caller holds wmu.
func (x *Index) remove(op, name string) error {
	x.mu.Lock()
	e, listed := x.pos[name]
	if listed {
		x.order.Remove(e)
		delete(x.pos, name)
		x.markDirtyLocked()
	}
	x.mu.Unlock()
	if listed {
		x.uncharge(1)
		x.changed(path.Join(x.idx, listFile))
	}
	for _, r := range x.refsOf(name) {
		if err := x.dropEntry(op, r.kind, r.key); err != nil {
			return err
		}
	}
	if x.current == name {
		return x.dropCurrent(op)
	}
	return nil
}

// SetCurrent replaces current (a write of index/current through the mount).
// EINVAL for a bad name, ENOENT unless the session directory exists.
func (x *Index) SetCurrent(name string) error {
	const op = "set current"
	return x.change(op, name, x.ready, func() error { return x.putCurrent(op, name, storefs.SyncAll) })
}

// SetEntry creates or replaces by-hash/<key> or by-uuid/<key> with name.
// EPERM for by-cwd (read only through the mount: only sends write it);
// EINVAL for an unknown kind, a bad key or a bad name; ENOENT when the
// session does not exist.
func (x *Index) SetEntry(kind, key, name string) error {
	const op = "set entry"
	if err := checkWritableKey(op, kind, key); err != nil {
		return err
	}
	return x.change(op, name, x.ready, func() error { return x.putEntry(op, kind, key, name, storefs.SyncAll, false) })
}

// SetEntryReserved is SetEntry for an entry whose name the caller charged
// beforehand with Reserve (an import, refused whole before anything is
// written when its session and its by-uuid entry would not both fit):
// the reservation becomes the entry's, and is given back when the entry
// was there already or is not written.
func (x *Index) SetEntryReserved(kind, key, name string) error {
	const op = "set entry"
	used := false
	err := checkWritableKey(op, kind, key)
	if err == nil {
		err = x.change(op, name, x.ready, func() error {
			used = true
			return x.putEntry(op, kind, key, name, storefs.SyncAll, true)
		})
	}
	if !used {
		x.Unreserve()
	}
	return err
}

// RemoveEntry unlinks by-hash/<key> or by-uuid/<key>, durably. EPERM for
// by-cwd, EINVAL for an unknown kind or a bad key, ENOENT when absent.
func (x *Index) RemoveEntry(kind, key string) error {
	const op = "remove entry"
	if err := checkWritableKey(op, kind, key); err != nil {
		return err
	}
	x.wmu.Lock()
	defer x.wmu.Unlock()
	if err := x.checkOpen(op); err != nil {
		return err
	}
	if _, ok := x.entries[kind][key]; !ok {
		return abi.Errorf(syscall.ENOENT, op, "%s/%s", kind, key)
	}
	if err := x.dropEntry(op, kind, key); err != nil {
		return err
	}
	// Durable before the unlink returns, as a write of an entry is
	// (SyncAll): a follower host reads only what the journal holds
	// durably, and would still show the entry.
	if x.values != nil {
		return x.values.Sync()
	}
	return nil
}

// change is one change of the index about the session name: name
// checked, then, holding wmu, the index checked by check (ready,
// readyListed, or only open), then fn.
func (x *Index) change(op, name string, check func(op, name string) error, fn func() error) error {
	if err := checkName(op, name); err != nil {
		return err
	}
	x.wmu.Lock()
	defer x.wmu.Unlock()
	if err := check(op, name); err != nil {
		return err
	}
	return fn()
}

// ---- helpers; the callers below hold wmu ----

// ready checks that the index is open and name is an existing session.
func (x *Index) ready(op, name string) error {
	if err := x.checkOpen(op); err != nil {
		return err
	}
	return x.checkSession(op, name)
}

// readyListed is ready without the stat for a session already in the list:
// the list is the index's own record of which sessions exist (Load builds it
// from the directories, Remove keeps it in step with archive and GC), and
// the engine has just written updated_at in the session anyway. Skipping
// the lookup keeps Touch free of a directory search in a container of
// 100,000 sessions.
func (x *Index) readyListed(op, name string) error {
	if _, ok := x.pos[name]; ok {
		return x.checkOpen(op)
	}
	return x.ready(op, name)
}

func (x *Index) checkOpen(op string) error {
	if x.view {
		return abi.Errorf(syscall.EROFS, op, "index of %s is a read-only view", x.root.Show(x.dir))
	}
	if x.closed {
		return abi.Errorf(syscall.EIO, op, "index of %s is closed", x.root.Show(x.dir))
	}
	return nil
}

// checkSession: ENOENT unless <container>/<name> is a real directory (a
// symlink is not a session).
func (x *Index) checkSession(op, name string) error {
	st, err := x.root.Lstat(path.Join(x.dir, name))
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return abi.Errorf(syscall.ENOENT, op, "no session %q", name)
	}
	return nil
}

// toFront moves (or adds) name to the top of the list. O(1).
func (x *Index) toFront(name string) {
	x.mu.Lock()
	if e, ok := x.pos[name]; ok {
		if x.order.Front() == e {
			x.mu.Unlock()
			return // already newest: nothing to rewrite
		}
		x.order.MoveToFront(e)
	} else {
		x.pos[name] = x.order.PushFront(name)
	}
	x.markDirtyLocked()
	x.mu.Unlock()
	x.changed(path.Join(x.idx, listFile))
}

// markDirtyLocked records a change of order and wakes the flusher; mu held
// for writing (or not yet shared, in Load).
func (x *Index) markDirtyLocked() {
	x.gen++
	x.dirty = true
	select {
	case x.kick <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// putCurrent writes index/current, skipping the write when it already holds
// name (a run of sends to one session costs no fsync here).
func (x *Index) putCurrent(op, name string, sync storefs.Sync) error {
	if x.current == name {
		return nil
	}
	p := path.Join(x.idx, currentFile)
	if err := x.writeFile(p, []byte(name+"\n"), sync); err != nil {
		return x.err(op, p, err)
	}
	x.mu.Lock()
	x.current = name
	x.mu.Unlock()
	x.changed(p)
	return nil
}

func (x *Index) dropCurrent(op string) error {
	p := path.Join(x.idx, currentFile)
	if err := x.removeFile(p); err != nil {
		return x.err(op, p, err)
	}
	x.mu.Lock()
	x.current = ""
	x.mu.Unlock()
	x.changed(p)
	return nil
}

// putEntry writes one entry file, skipping the write when it already holds
// name. reserved: a new entry's name was charged already (Reserve); the
// charge is given back when the entry is not new or not written.
func (x *Index) putEntry(op, kind, key, name string, sync storefs.Sync, reserved bool) error {
	old, ok := x.entries[kind][key]
	if ok && reserved {
		x.uncharge(1) // not a new name: the reservation is not needed
	}
	if ok && old == name {
		return nil
	}
	if !ok && !reserved { // a new name: charged before its file is written
		if err := x.charge(1); err != nil {
			return err
		}
	}
	p := path.Join(x.idx, kind, key)
	if err := x.writeFile(p, []byte(name+"\n"), sync); err != nil {
		if !ok {
			x.uncharge(1)
		}
		return x.err(op, p, err)
	}
	x.mu.Lock()
	x.setEntryLocked(kind, key, name)
	x.mu.Unlock()
	x.changed(p)
	return nil
}

func (x *Index) dropEntry(op, kind, key string) error {
	p := path.Join(x.idx, kind, key)
	if err := x.removeFile(p); err != nil {
		return x.err(op, p, err)
	}
	x.mu.Lock()
	_, had := x.entries[kind][key]
	x.deleteEntryLocked(kind, key)
	x.mu.Unlock()
	if had {
		x.uncharge(1)
	}
	x.changed(p)
	return nil
}

// setEntryLocked sets an entry in memory and keeps the reverse map in step.
func (x *Index) setEntryLocked(kind, key, name string) {
	x.deleteEntryLocked(kind, key)
	if x.entries[kind] == nil {
		x.entries[kind] = make(map[string]string)
	}
	x.entries[kind][key] = name
	if x.refs[name] == nil {
		x.refs[name] = make(map[ref]struct{})
	}
	x.refs[name][ref{kind, key}] = struct{}{}
}

func (x *Index) deleteEntryLocked(kind, key string) {
	old, ok := x.entries[kind][key]
	if !ok {
		return
	}
	delete(x.entries[kind], key)
	delete(x.refs[old], ref{kind, key})
	if len(x.refs[old]) == 0 {
		delete(x.refs, old)
	}
}

// refsOf returns the entries naming name, in a fixed order.
func (x *Index) refsOf(name string) []ref {
	rs := make([]ref, 0, len(x.refs[name]))
	for r := range x.refs[name] {
		rs = append(rs, r)
	}
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].kind != rs[j].kind {
			return rs[i].kind < rs[j].kind
		}
		return rs[i].key < rs[j].key
	})
	return rs
}

// ---- validation ----

func knownKind(kind string) bool { return slices.Contains(abi.IndexKinds, kind) }

func checkName(op, name string) error {
	if !abi.ValidSessionName(name) {
		return abi.Errorf(syscall.EINVAL, op, "invalid session name %q", name)
	}
	return nil
}

// checkWritableKey: by-cwd is EPERM whatever the key (the entry is read only
// through the mount), then the kind and key must be valid.
func checkWritableKey(op, kind, key string) error {
	switch {
	case kind == abi.IndexByCwd:
		return abi.Errorf(syscall.EPERM, op, "by-cwd is read only")
	case !knownKind(kind):
		return abi.Errorf(syscall.EINVAL, op, "unknown index kind %q", kind)
	case !abi.ValidIndexKey(kind, key):
		return abi.Errorf(syscall.EINVAL, op, "invalid %s key %q", kind, key)
	}
	return nil
}
