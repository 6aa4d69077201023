package session

import (
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/session/archive"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/tree"
	"github.com/ctxfs/ctxfs/session/versions"
)

// This file is what the FUSE projection (package fs) asks of the engine:
// what a path of the tree is, who may do what to it, and the store file
// behind it. fs turns system calls into these calls and decides nothing.
// Paths are relative to the mount root, which mirrors the store
// ("home/1000/agent/coder/session/default/state"). What needs no session
// (names, listings, the index's files, the rules of each place) is
// package tree's, which the engine embeds (Engine.Tree); what changes a
// session or judges its values is here.

// The tree's types, as fs names them (package tree).
type (
	Node     = tree.Node
	Promises = tree.Promises
	DirEntry = tree.DirEntry
	SetAttr  = tree.SetAttr
)

// Nobody is the uid and gid of a caller the kernel did not name (tree.Nobody).
const Nobody = tree.Nobody

// Stat describes the store file behind rel, never following a link.
// A derived file whose new value is not yet written is described as it
// will be (behind).
func (e *Engine) Stat(rel string) (*unix.Stat_t, error) { return e.lstat(rel) }

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
	switch pl.Kind {
	case layout.PlaceValue:
		if pl.File == abi.FileMeta {
			return e.checkMeta(pl.Ref(), data)
		}
		return tree.CheckPlainValue(pl.File, data)
	case layout.PlaceIndexCurrent, layout.PlaceIndexEntry:
		return e.CheckIndexValue(pl, data)
	}
	return nil
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
	pl, err := tree.Creatable(rel)
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

// renameFlags are the rename flags the kernel may pass (NOREPLACE,
// EXCHANGE, WHITEOUT).
const renameFlags = unix.RENAME_NOREPLACE | unix.RENAME_EXCHANGE | unix.RENAME_WHITEOUT

// Rename renames oldRel to newRel through the mount: flags the kernel does
// not define are EINVAL; entries of the ABI are never renamed (EPERM)
// but a session archived by its move to its archive's place (SPEC 12).
func (e *Engine) Rename(c layout.Caller, oldRel, newRel string, flags uint32) error {
	old, err := RenameRule(oldRel, newRel, flags)
	if err != nil {
		return err
	}
	own, err := e.homeOwner(c, old.Home)
	if err != nil {
		return err
	}
	return e.Archive(old.Ref(), own, false) // SPEC 12: the same archive as ctx's
}

// SetattrChange is how a change of attributes a is announced: Touched
// when it sets times given, else Changed.
func SetattrChange(a SetAttr) Change {
	if a.Times != nil && !a.Now {
		return Touched
	}
	return Changed
}

// RenameRule is what may be renamed through the mount, by the names
// alone: a session to its archive's place (SPEC 12), with
// RENAME_NOREPLACE (EPERM otherwise; EINVAL for flags the kernel does not
// define). It returns the old name's place.
func RenameRule(oldRel, newRel string, flags uint32) (layout.Place, error) {
	old := layout.Classify(oldRel)
	switch {
	case flags&^renameFlags != 0:
		return old, abi.Errorf(syscall.EINVAL, "rename", "unknown flags %#x", flags)
	case old.Kind != layout.PlaceSession || old.Container.Kind != abi.KindAgent || newRel != archive.Target(old.Ref()):
		return old, abi.Errorf(syscall.EPERM, "rename", "entries of the ABI are not renamed")
	case flags != unix.RENAME_NOREPLACE:
		return old, abi.Errorf(syscall.EPERM, "rename", "a session is archived by renameat2 with RENAME_NOREPLACE only")
	}
	return old, nil
}

// CheckOpen is the tree's rule for opening a file (tree.Tree.CheckOpen),
// and a version's content verified at each open (EIO, session/versions).
func (e *Engine) CheckOpen(pl layout.Place, flags int) error {
	if err := e.Tree.CheckOpen(pl, flags); err != nil {
		return err
	}
	if pl.Kind == layout.PlaceVersion {
		return versions.Check(e.root, e.sealKey, pl.Ref().Rel(), pl.File)
	}
	return nil
}

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
	badSize := a.Size != nil && (*a.Size != 0 || !tree.Truncatable(pl))
	switch pl.Kind {
	case layout.PlaceCtl, layout.PlaceIndexList, layout.PlaceIndexCurrent, layout.PlaceIndexEntry:
		return tree.VirtualSetattr(pl, a)
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
	case !a.OnlyTimes() && pl.Kind != layout.PlaceTop && pl.Kind != layout.PlaceSpace && !layout.FreeTree(rel):
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
	e.changedBy(SetattrChange(a), rel) // what Value remembers of its attributes, too
	return err
}
