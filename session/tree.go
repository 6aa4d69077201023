package session

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/index"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/versions"
)

// This file is what the FUSE projection (package fs) asks of the engine:
// what a path of the tree is, who may do what to it, and the store file
// behind it. fs turns system calls into these calls and decides nothing.
// Paths are relative to the mount root, which mirrors the store
// ("home/1000/agent/coder/session/default/state").

// Nobody is the uid and gid of a caller the kernel did not name: never
// root by accident.
const Nobody = 65534

// Node is what a path of the tree is.
type Node struct {
	Place layout.Place
	// Stat is the store file's, never following a link; for a virtual
	// file (ctl, index/list, an index value) it is its directory's.
	Stat     *unix.Stat_t
	Virtual  bool
	Dir      bool // a directory (of the ABI, of a free tree, or archived)
	Promises      // of a directory: what fs may let the kernel keep of it
}

// Promises are what the engine promises about a directory's listing, so
// that fs may let the kernel keep it: fs reads them, and never decides
// them from the directory's kind. The zero value (the kernel always asks)
// is the safe answer, and is every other directory's: the mount roots and
// the structural directories (another process may add a shared space to
// the store), the archive and the free trees (written behind the kernel's
// back by a jailed run, through a bind of the store).
type Promises struct {
	// CacheListing: the kernel may keep the directory's listing
	// (FOPEN_CACHE_DIR) and its attributes for long. Kept because every
	// change of the directory's names is announced (changed, which tells
	// the mounts through OnChange) right after it is made, before it is
	// acknowledged: a session made (CreateSession, create: its
	// container) or archived (Archive: the session, its container and
	// the index files that named it); the index directory made when its
	// index loads (Index: the container); a value or snapshot of a
	// session replaced (its file, by the writer of each: the session
	// directory's attributes go stale with it); an index entry or
	// current written or removed (index.OnChange, wired in Index). A
	// change of names also moves the store directory's mtime, which the
	// kernel checks before serving a cached listing, except where
	// ListedFromMemory.
	CacheListing bool
	// ListedFromMemory: the directory lists what the index holds in
	// memory (indexEntries), and its store files follow at the journal's
	// checkpoint, so its store mtime does not move when a name comes or
	// goes: fs moves the directory's own stamp when one of its names is
	// announced, which is what resets the kernel's cached listing.
	ListedFromMemory bool
}

// promisesOf is what the engine promises about the listing of a directory
// of place pl (see Promises): the session containers, the sessions and
// the index's directories, which hold what a user lists most.
func promisesOf(pl layout.Place) Promises {
	switch pl.Kind {
	case layout.PlaceSessions, layout.PlaceSession:
		return Promises{CacheListing: true}
	case layout.PlaceIndex, layout.PlaceIndexKeys:
		return Promises{CacheListing: true, ListedFromMemory: true}
	}
	return Promises{}
}

// Lookup says what rel is: ENOENT when the tree has no such name, or when
// the store holds something there that the tree does not (a symlink, a
// FIFO, a file where a directory belongs: fsck names those). A uid's own
// home appears on its first lookup by that uid (SPEC 2). Only the caller's
// uid matters here: lookups are the hottest path of the tree.
func (e *Engine) Lookup(uid uint32, rel string) (Node, error) {
	pl := layout.Classify(rel)
	if !pl.Exists() {
		return Node{}, syscall.ENOENT
	}
	switch pl.Kind {
	case layout.PlaceHome:
		if pl.Home == layout.PrivateHome(uid) && uid != Nobody {
			e.EnsureHome(uid) // a failure shows as the ENOENT below
		}
	case layout.PlaceIndex:
		e.Index(pl.Container) // loading the index makes index/ in the store
	case layout.PlaceCtl, layout.PlaceIndexList, layout.PlaceIndexCurrent, layout.PlaceIndexEntry:
		return e.virtual(pl, rel)
	}
	st, err := e.lstat(rel)
	if err != nil {
		return Node{}, err
	}
	n := Node{Place: pl, Stat: st}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		n.Dir = pl.IsDir() || pl.Kind == layout.PlaceArchived
		n.Promises = promisesOf(pl)
	case unix.S_IFREG:
		if pl.IsDir() {
			return Node{}, syscall.ENOENT
		}
		return n, nil
	}
	if !n.Dir {
		return Node{}, syscall.ENOENT
	}
	return n, nil
}

// virtual describes a file the store does not hold as such: ctl, the
// list (served from memory), index values (served from the index).
func (e *Engine) virtual(pl layout.Place, rel string) (Node, error) {
	if pl.Kind == layout.PlaceIndexCurrent || pl.Kind == layout.PlaceIndexEntry {
		if _, err := e.IndexValue(pl); err != nil {
			return Node{}, err
		}
	}
	st, err := e.lstat(path.Dir(rel))
	if err != nil {
		return Node{}, err
	}
	return Node{Place: pl, Stat: st, Virtual: true}, nil
}

// Stat describes the store file behind rel, never following a link.
// A derived file whose new value is not yet written is described as it
// will be (behind).
func (e *Engine) Stat(rel string) (*unix.Stat_t, error) { return e.lstat(rel) }

// Gone reports whether the tree no longer holds rel: its store file or
// directory is missing, or, for an index value, the index names no
// session there. ctl and index/list exist as long as their directory.
func (e *Engine) Gone(rel string) bool {
	pl := layout.Classify(rel)
	switch pl.Kind {
	case layout.PlaceCtl, layout.PlaceIndexList:
		return false
	case layout.PlaceIndexCurrent, layout.PlaceIndexEntry:
		_, err := e.IndexValue(pl)
		return errors.Is(err, syscall.ENOENT)
	}
	_, err := e.root.Lstat(rel)
	return errors.Is(err, fs.ErrNotExist)
}

// appended announces that the session's logs named grew (every append
// the engine makes: a send's records, a run's frames, events).
func (s *sess) appended(files ...string) {
	if s.rel == "" {
		return // a temp session has no files
	}
	for _, f := range files {
		s.e.changed(s.file(f))
	}
}

// DirEntry is one name a directory of the tree lists.
type DirEntry struct {
	Name     string
	Dir      bool
	FreeRoot bool   // the root of a free tree (root/, context/)
	Ino      uint64 // the store's inode number (0 for virtual files)
}

// ReadDir lists the directory rel of the tree: the names the ABI allows
// there that the store holds as directories or regular files (never the
// store's dot names), and the virtual files (ctl in a session, list in
// index/).
func (e *Engine) ReadDir(rel string) ([]DirEntry, error) {
	pl := layout.Classify(rel)
	if pl.Kind == layout.PlaceSessions {
		e.Index(pl.Container) // so that index/ is listed from the start
	}
	ents, err := e.root.ReadDir(rel)
	if err != nil {
		return nil, err
	}
	out := make([]DirEntry, 0, len(ents)+1)
	for _, ent := range ents {
		cp := layout.Classify(rel + "/" + ent.Name)
		if !cp.Exists() || cp.Kind == layout.PlaceCtl || !(ent.IsDir() || ent.IsRegular()) {
			continue
		}
		if cp.Kind == layout.PlaceIndexCurrent || cp.Kind == layout.PlaceIndexEntry || cp.Kind == layout.PlaceIndexList {
			continue // from the index itself, below
		}
		out = append(out, DirEntry{Name: ent.Name, Dir: ent.IsDir(), FreeRoot: cp.Kind == layout.PlaceFreeRoot, Ino: ent.Ino})
	}
	switch pl.Kind {
	case layout.PlaceSession:
		out = append(out, DirEntry{Name: abi.FileCtl})
	case layout.PlaceIndex, layout.PlaceIndexKeys:
		return e.indexEntries(pl, out)
	}
	return out, nil
}

// indexEntries adds an index directory's values as the index holds them:
// the store's files lag it (a value is written when the journal is
// checkpointed: sealedlog.Journal.PutValue).
func (e *Engine) indexEntries(pl layout.Place, out []DirEntry) ([]DirEntry, error) {
	x, err := e.Index(pl.Container)
	if err != nil {
		return nil, err
	}
	if pl.Kind == layout.PlaceIndexKeys {
		for _, k := range x.Keys(pl.IndexKind) {
			out = append(out, DirEntry{Name: k})
		}
		return out, nil
	}
	out = append(out, DirEntry{Name: "list"})
	if x.Current() != "" {
		out = append(out, DirEntry{Name: "current"})
	}
	return out, nil
}

// CheckOpen says whether a file of the tree may be opened with flags
// (SPEC 5, 6, 9): a log only for appending, read-only files and the list
// only for reading, index values for writing only where SPEC 9 allows.
func (e *Engine) CheckOpen(pl layout.Place, flags int) error {
	write := flags&syscall.O_ACCMODE != syscall.O_RDONLY
	trunc := flags&syscall.O_TRUNC != 0
	switch pl.Kind {
	case layout.PlaceLog:
		if write && (flags&syscall.O_APPEND == 0 || trunc) {
			return abi.Errorf(syscall.EPERM, "open", "a log is opened for writing with O_APPEND only")
		}
	case layout.PlaceReadOnly, layout.PlaceArchived, layout.PlaceIndexList, layout.PlaceVersion:
		if write || trunc {
			return abi.Errorf(syscall.EPERM, "open", "read-only file")
		}
		if pl.Kind == layout.PlaceVersion { // verified at each open (EIO)
			return versions.Check(e.root, e.sealKey, pl.Ref().Rel(), pl.File)
		}
	case layout.PlaceIndexCurrent, layout.PlaceIndexEntry:
		if write && !pl.WritableIndex() {
			return abi.Errorf(syscall.EPERM, "open", "by-cwd is read only")
		}
	}
	return nil
}

// OpenRead opens the store file behind rel for reading (a log, an
// archived file): a regular file, never through a link.
func (e *Engine) OpenRead(rel string) (*os.File, error) {
	return e.root.OpenFile(rel, os.O_RDONLY, 0)
}

// ReadFile reads the store file behind rel whole, at most limit bytes (a
// derived value not yet written: from memory, behind). The bytes may be
// shared: callers must not change them.
func (e *Engine) ReadFile(rel string, limit int64) ([]byte, error) {
	return e.readFile(rel, limit)
}

// CheckValue judges a complete value (ending in "\n") written to a
// single-value file or an index value before it is committed, so that a
// bad one fails its write at once (shells ignore close errors), as the
// commit would: EINVAL, ENOENT for an index value naming no session,
// EEXIST for a self_id taken. It changes nothing. A meta.json that is
// still an unfinished JSON value passes (the commit judges it whole).
func (e *Engine) CheckValue(pl layout.Place, data []byte) error {
	v := string(bytes.TrimSuffix(data, []byte("\n")))
	switch pl.Kind {
	case layout.PlaceValue:
		switch pl.File {
		case abi.FileState:
			if !abi.ValidState(v) {
				return abi.Errorf(syscall.EINVAL, "write", "invalid state %q", v)
			}
		case abi.FileCwd:
			return abi.CheckCwd(v)
		case abi.FileMeta:
			return e.checkMeta(pl.Ref(), data)
		}
	case layout.PlaceIndexCurrent, layout.PlaceIndexEntry:
		name, err := index.ParseValue(data)
		if err != nil {
			return err
		}
		if !e.sessionExists(layout.Ref{Container: pl.Container, Name: name}) {
			return abi.Errorf(syscall.ENOENT, "write", "no session %q", name)
		}
	}
	return nil
}

// IndexValue is the session an index value names (index/current or an
// entry of by-cwd/, by-hash/, by-uuid/); ENOENT when none.
func (e *Engine) IndexValue(pl layout.Place) (string, error) {
	x, err := e.Index(pl.Container)
	if err != nil {
		return "", err
	}
	if pl.Kind == layout.PlaceIndexCurrent {
		if cur := x.Current(); cur != "" {
			return cur, nil
		}
		return "", syscall.ENOENT
	}
	return x.Lookup(pl.IndexKind, pl.Key)
}

// IndexList is the content of index/list: always current, unlike the
// store's snapshot.
func (e *Engine) IndexList(ct layout.Container) ([]byte, error) {
	x, err := e.Index(ct)
	if err != nil {
		return nil, err
	}
	return x.ListBytes(), nil
}

// WriteIndex replaces index/current or an entry of by-hash/ or by-uuid/
// with the session named by data (SPEC 9): EINVAL for a bad name, ENOENT
// for a session that does not exist, EPERM for by-cwd.
func (e *Engine) WriteIndex(c layout.Caller, pl layout.Place, data []byte) error {
	if !pl.WritableIndex() {
		return abi.Errorf(syscall.EPERM, "write", "read-only index file")
	}
	name, err := index.ParseValue(data)
	if err != nil {
		return err
	}
	x, err := e.Index(pl.Container)
	if err != nil {
		return err
	}
	if pl.Kind == layout.PlaceIndexCurrent {
		return x.SetCurrent(name)
	}
	return x.SetEntry(pl.IndexKind, pl.Key, name)
}

// creatable says whether a name may be made at rel at all (by mkdir,
// create, symlink, link or mknod): EPERM outside the ABI and in archives,
// EINVAL for a bad name in a slot that takes one.
func (e *Engine) creatable(rel string) (layout.Place, error) {
	pl := layout.Classify(rel)
	parent := layout.Classify(path.Dir(rel))
	switch {
	case parent.Kind == layout.PlaceArchived:
		return pl, abi.Errorf(syscall.EPERM, "create", "archived sessions are read only")
	case pl.Kind == layout.PlaceBadName:
		return pl, abi.Errorf(syscall.EINVAL, "create", "invalid name %q", path.Base(rel))
	case !pl.Exists():
		return pl, abi.Errorf(syscall.EPERM, "create", "not a name the ABI allows here")
	}
	return pl, nil
}

// CheckCreate says whether a file may be created at rel through the mount:
// only index values SPEC 9 lets users write (current, by-hash/<key>,
// by-uuid/<uuid>); the value is committed when it is written and closed.
// Every other file of the ABI is made by the engine.
func (e *Engine) CheckCreate(rel string) (layout.Place, error) {
	pl, err := e.creatable(rel)
	if err == nil && !pl.WritableIndex() {
		err = abi.Errorf(syscall.EPERM, "create", "only the engine makes this file")
	}
	return pl, err
}

// MakeNode is the answer to a symlink, hard link or device node made in a
// directory of the ABI: the tree holds only the directories and regular
// files the engine makes (EPERM; EINVAL for a bad name in a name slot).
func (e *Engine) MakeNode(rel string) error {
	if _, err := e.creatable(rel); err != nil {
		return err
	}
	return abi.Errorf(syscall.EPERM, "create", "the ABI holds no links or device nodes")
}

// MkdirAt makes the directory rel through the mount: a session (as by its
// first send), a structural directory of the tree, or one of the
// archive's (files.go); the rules of SPEC 2 and 12 say which may exist
// (EPERM otherwise, EINVAL for a bad name). The checks come in this
// order, which the errno shows: the archive's shape, then whether a name
// may be made there at all (creatable), then the caller's right to the
// home, then what may be made in it.
func (e *Engine) MkdirAt(c layout.Caller, rel string) error {
	if home, agent, ok := layout.ArchiveDir(rel); ok {
		return e.mkdirArchive(c, home, agent, rel)
	}
	pl, err := e.creatable(rel)
	switch {
	case err != nil:
		return err
	case !pl.IsDir():
		return abi.Errorf(syscall.EPERM, "mkdir", "not a directory of the ABI")
	}
	switch pl.Kind {
	case layout.PlaceSession:
		return e.CreateSession(c, pl.Ref())
	case layout.PlaceSpace:
		return e.mkdirSpace(c, pl.Home)
	case layout.PlaceHome:
		return e.mkdirHome(c, pl.Home)
	case layout.PlaceTop:
		return notMade(rel)
	}
	return e.mkdirInHome(c, pl, rel)
}

// Unlink removes rel through the mount: by-hash and by-uuid entries only;
// every other entry of the ABI stays (EPERM).
func (e *Engine) Unlink(c layout.Caller, rel string) error {
	pl := layout.Classify(rel)
	if pl.Kind != layout.PlaceIndexEntry || !pl.WritableIndex() || layout.Classify(path.Dir(rel)).Kind == layout.PlaceArchived {
		return abi.Errorf(syscall.EPERM, "unlink", "entries of the ABI are not removed")
	}
	x, err := e.Index(pl.Container)
	if err != nil {
		return err
	}
	return x.RemoveEntry(pl.IndexKind, pl.Key)
}

// Rmdir: a non-empty directory is ENOTEMPTY, as anywhere; an empty ABI
// directory still may not go (EPERM).
func (e *Engine) Rmdir(c layout.Caller, rel string) error {
	ents, err := e.root.ReadDir(rel)
	if err != nil {
		return err
	}
	if len(ents) > 0 {
		return syscall.ENOTEMPTY
	}
	return abi.Errorf(syscall.EPERM, "rmdir", "directories of the ABI are not removed")
}

// renameFlags are the rename flags the kernel may pass (NOREPLACE,
// EXCHANGE, WHITEOUT).
const renameFlags = unix.RENAME_NOREPLACE | unix.RENAME_EXCHANGE | unix.RENAME_WHITEOUT

// Rename renames oldRel to newRel through the mount: flags the kernel does
// not define are EINVAL; entries of the ABI are never renamed (EPERM).
// (Archiving a session, SPEC 12, is a later issue.)
func (e *Engine) Rename(c layout.Caller, oldRel, newRel string, flags uint32) error {
	if flags&^renameFlags != 0 {
		return abi.Errorf(syscall.EINVAL, "rename", "unknown flags %#x", flags)
	}
	old := layout.Classify(oldRel)
	if old.Kind != layout.PlaceSession || old.Container.Kind != abi.KindAgent || newRel != archiveTarget(old.Ref()) {
		return abi.Errorf(syscall.EPERM, "rename", "entries of the ABI are not renamed")
	}
	if flags != unix.RENAME_NOREPLACE {
		return abi.Errorf(syscall.EPERM, "rename", "a session is archived by renameat2 with RENAME_NOREPLACE only")
	}
	own, err := e.homeOwner(c, old.Home)
	if err != nil {
		return err
	}
	return e.Archive(old.Ref(), own, false) // SPEC 12: the same archive as ctx's
}

// SetAttr is a change of attributes through the mount; nil fields stay.
type SetAttr struct {
	Size     *uint64
	Mode     *uint32
	Uid, Gid *uint32
	Times    *[2]unix.Timespec // atime, mtime; unix.UTIME_OMIT keeps one
}

// onlyTimes reports whether a change touches nothing but times (and a
// size the caller has judged already).
func (a SetAttr) onlyTimes() bool { return a.Mode == nil && a.Uid == nil && a.Gid == nil }

// Setattr changes the attributes of rel through the mount (the kernel has
// checked that the caller may change them, from the store's owners and
// modes). The size rules are SPEC 5 and 6: logs never shrink or grow by
// truncation, values are replaced whole (`>` truncates to 0 first, a
// no-op), read-only files, the list and archives take nothing but a touch
// of their times. The top directories and a shared space's directory take
// mode and owner (root sets a space's group and mode this way, SPEC 2);
// history's owners and modes are the engine's (store.go: the store holds
// it as the server's, the mount shows its logical owner), so everything
// else takes only its times.
func (e *Engine) Setattr(c layout.Caller, rel string, a SetAttr) error {
	pl := layout.Classify(rel)
	badSize := a.Size != nil && (*a.Size != 0 || !truncatable(pl))
	switch pl.Kind {
	case layout.PlaceCtl, layout.PlaceIndexList, layout.PlaceIndexCurrent, layout.PlaceIndexEntry:
		// Virtual: nothing in the store to change.
		if badSize || !a.onlyTimes() {
			return abi.Errorf(syscall.EPERM, "setattr", "the engine owns this file")
		}
		return nil
	case layout.PlaceArchived:
		return abi.Errorf(syscall.EPERM, "setattr", "archived sessions are read only")
	case layout.PlaceVersion, layout.PlaceVersionsDir:
		return abi.Errorf(syscall.EPERM, "setattr", "versions are read only")
	}
	n, err := e.Lookup(c.Uid, rel)
	switch {
	case err != nil:
		return err
	case n.Dir && a.Size != nil:
		return syscall.EISDIR
	case !a.onlyTimes() && pl.Kind != layout.PlaceTop && pl.Kind != layout.PlaceSpace && !layout.FreeTree(rel):
		return abi.Errorf(syscall.EPERM, "setattr", "the engine owns the owners and modes of history")
	case n.Dir:
	case badSize:
		return abi.Errorf(syscall.EPERM, "truncate", "only single values are replaced, and whole")
	}
	if a.Mode == nil && a.Uid == nil && a.Gid == nil && a.Times == nil {
		return nil // `>`'s truncation of a value: nothing to apply
	}
	e.derived.FlushRel(rel) // the change is to the value as it is now
	err = a.Apply(e.root, rel)
	e.changed(rel) // what Value remembers of its attributes, too
	return err
}

// truncatable places take `>` (truncate to 0 before the new value).
func truncatable(pl layout.Place) bool {
	switch pl.Kind {
	case layout.PlaceValue, layout.PlaceCtl, layout.PlaceIndexCurrent, layout.PlaceIndexEntry:
		return true
	}
	return false
}

// Apply changes the mode, owner and times a SetAttr names of the store
// file rel (never of what a link points at); its size is each caller's
// to judge and apply.
func (a SetAttr) Apply(root *storefs.Root, rel string) error {
	if a.Mode != nil {
		if err := root.Chmod(rel, *a.Mode&07777); err != nil {
			return err
		}
	}
	if a.Uid != nil || a.Gid != nil {
		uid, gid := -1, -1
		if a.Uid != nil {
			uid = int(*a.Uid)
		}
		if a.Gid != nil {
			gid = int(*a.Gid)
		}
		if err := root.Chown(rel, uid, gid); err != nil {
			return err
		}
	}
	if a.Times != nil {
		return root.Utimes(rel, *a.Times)
	}
	return nil
}

// Statfs describes the store's filesystem (df, and tools that check space).
func (e *Engine) Statfs() (*unix.Statfs_t, error) { return e.root.Statfs() }
