package tree

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/session/layout"
	"golang.org/x/sys/unix"
)

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
	// change of the directory's names is announced (the engine's changed,
	// which tells the mounts through OnChange) right after it is made,
	// before it is acknowledged: a session made (CreateSession, create: its
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
func (t Tree) Lookup(uid uint32, rel string) (Node, error) {
	pl := layout.Classify(rel)
	if !pl.Exists() {
		return Node{}, syscall.ENOENT
	}
	switch pl.Kind {
	case layout.PlaceHome:
		if pl.Home == layout.PrivateHome(uid) && uid != Nobody {
			t.e.EnsureHome(uid) // a failure shows as the ENOENT below
		}
	case layout.PlaceIndex:
		t.e.Index(pl.Container) // loading the index makes index/ in the store
	case layout.PlaceCtl, layout.PlaceIndexList, layout.PlaceIndexCurrent, layout.PlaceIndexEntry:
		return t.virtual(pl, rel)
	}
	st, err := t.e.Stat(rel)
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
func (t Tree) virtual(pl layout.Place, rel string) (Node, error) {
	if pl.Kind == layout.PlaceIndexCurrent || pl.Kind == layout.PlaceIndexEntry {
		if _, err := t.IndexValue(pl); err != nil {
			return Node{}, err
		}
	}
	st, err := t.e.Stat(path.Dir(rel))
	if err != nil {
		return Node{}, err
	}
	return Node{Place: pl, Stat: st, Virtual: true}, nil
}

// Gone reports whether the tree no longer holds rel: its store file or
// directory is missing, or, for an index value, the index names no
// session there. ctl and index/list exist as long as their directory.
func (t Tree) Gone(rel string) bool {
	pl := layout.Classify(rel)
	switch pl.Kind {
	case layout.PlaceCtl, layout.PlaceIndexList:
		return false
	case layout.PlaceIndexCurrent, layout.PlaceIndexEntry:
		_, err := t.IndexValue(pl)
		return errors.Is(err, syscall.ENOENT)
	}
	_, err := t.root.Lstat(rel)
	return errors.Is(err, fs.ErrNotExist)
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
func (t Tree) ReadDir(rel string) ([]DirEntry, error) {
	pl := layout.Classify(rel)
	if pl.Kind == layout.PlaceSessions {
		t.e.Index(pl.Container) // so that index/ is listed from the start
	}
	ents, err := t.root.ReadDir(rel)
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
		return t.indexEntries(pl, out)
	}
	return out, nil
}

// indexEntries adds an index directory's values as the index holds them:
// the store's files lag it (a value is written when the journal is
// checkpointed: sealedlog.Journal.PutValue).
func (t Tree) indexEntries(pl layout.Place, out []DirEntry) ([]DirEntry, error) {
	x, err := t.e.Index(pl.Container)
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

// OpenRead opens the store file behind rel for reading (a log, an
// archived file): a regular file, never through a link. The opener c is
// for a follower's verification (cluster/replica); the tree needs none.
func (t Tree) OpenRead(c layout.Caller, rel string) (*os.File, error) {
	return t.root.OpenFile(rel, os.O_RDONLY, 0)
}

// Statfs describes the store's filesystem (df, and tools that check space).
func (t Tree) Statfs() (*unix.Statfs_t, error) { return t.root.Statfs() }
