package fsck

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/sealedlog"
	"github.com/ctxfs/ctxfs/session/versions"
)

// What checkShape says about names it does not expect.
const (
	shapeNotHere     = "not a name the store holds here"
	shapeLeftoverTmp = "leftover temporary file of an interrupted replace"
	shapeLeftoverNew = "leftover temporary directory of an interrupted session creation"
	shapeLeftoverDel = "leftover directory of an interrupted deletion of an archived session"
)

// shapeSealFiles are the files a session's .seal directory holds.
var shapeSealFiles = map[string]bool{abi.FileMessages: true, abi.FileEvents: true, layout.IdentityFile: true}

// shapeSpared are the session files the engine rewrites through a spare
// twin (".NAME.spare").
var shapeSpared = map[string]bool{
	abi.FileState: true, abi.FileUpdatedAt: true, abi.FileLatest: true,
	abi.FileCwd: true, abi.FileAgentsMD: true, abi.FileSkillsMD: true,
}

// shapeOwner is who must own what lies in one home or shared space, and
// with which modes. In a home that is the home's uid (any group), in a
// space the space's group (any writer). A mode of 0 is not checked.
type shapeOwner struct {
	uid, gid          int64 // -1: not checked
	dirMode, fileMode uint32
	rootOK            bool   // root may own it too (.self_id)
	who               string // whose uid is expected, for messages
}

func homeShape(uid int64) shapeOwner {
	return shapeOwner{uid: uid, gid: -1, dirMode: 0o700, fileMode: 0o600, who: "the home's owner"}
}

func spaceShape(gid int64) shapeOwner {
	return shapeOwner{uid: -1, gid: gid, dirMode: 0o770, fileMode: 0o660}
}

// history is what the store holds of own's history: the server's (uid 0,
// as the server runs), its owner's mode bits only, the group kept
// (the engine's store.go, historyOwner). Only the free trees are the user's.
func (own shapeOwner) history() shapeOwner {
	own.uid, own.who, own.rootOK = 0, "root: history is the server's", false
	own.dirMode &= 0o700
	own.fileMode &= 0o700
	return own
}

// anyMode is own with the modes unchecked: the store's dot entries and
// archived trees keep whatever mode they have.
func (own shapeOwner) anyMode() shapeOwner {
	own.dirMode, own.fileMode = 0, 0
	return own
}

// shapeWalk is one walk of a store.
type shapeWalk struct {
	r      *storefs.Root
	report func(rel, what string, leftover bool)
	n      int
}

// checkShape walks the store below r and reports, one call each, what
// the store holds that it should not; leftover marks what an interrupted
// write left (a temporary file or directory nothing relies on, which
// fsck --repair may remove). It returns how many it reported.
//
// It looks at types, names, owners and modes only (the contents of logs
// and values are fsckSession's business). Every access goes through r,
// so no symlink is ever followed or descended into, and the free trees
// (root/, context/), which users fill as they like, are not entered.
func checkShape(r *storefs.Root, report func(rel, what string, leftover bool)) int {
	w := &shapeWalk{r: r, report: report}
	w.top()
	return w.n
}

func (w *shapeWalk) bad(rel, what string) {
	w.n++
	w.report(rel, what, false)
}

// leftover reports what an interrupted write left behind.
func (w *shapeWalk) leftover(rel, what string) {
	w.n++
	w.report(rel, what, true)
}

// top checks the store's own level: the two trees and the server's files.
func (w *shapeWalk) top() {
	for _, e := range w.list(".") {
		rel := e.Name
		switch rel {
		case "home", "shared":
			st := w.stat(rel)
			if st == nil || !w.isType(rel, st, unix.S_IFDIR) {
				continue
			}
			w.owned(rel, st, shapeOwner{uid: 0, gid: -1, who: "root"})
			// Its entries are homes and spaces, each with its own owner.
			w.dir(rel, layout.Place{Kind: layout.PlaceTop}, shapeOwner{uid: -1, gid: -1})
		case ".ctxfs": // the server's state: root's alone, files only
			st := w.stat(rel)
			if st == nil || !w.isType(rel, st, unix.S_IFDIR) {
				continue
			}
			w.owned(rel, st, shapeOwner{uid: 0, gid: -1, dirMode: 0o700, who: "root"})
			for _, f := range w.list(rel) {
				st := w.stat(rel + "/" + f.Name)
				if st == nil || !w.isType(rel+"/"+f.Name, st, unix.S_IFREG) {
					continue
				}
				if f.Name == sealedlog.KeyFile || f.Name == sealedlog.MigratingKeyFile {
					w.owned(rel+"/"+f.Name, st, shapeOwner{uid: 0, gid: -1, fileMode: 0o600, who: "root"})
				}
			}
		case ".ctxfs.lock", "ctxfs.log":
			if st := w.stat(rel); st != nil {
				w.isType(rel, st, unix.S_IFREG)
			}
		default:
			if strings.HasPrefix(rel, storefs.ProbePrefix) {
				continue // a probe's scratch (storefs.Ways): the next probe removes it
			}
			w.bad(rel, shapeNotHere)
		}
	}
}

// dir checks each entry of the directory rel, whose place is dp and whose
// contents own must own.
func (w *shapeWalk) dir(rel string, dp layout.Place, own shapeOwner) {
	for _, e := range w.list(rel) {
		w.entry(rel, dp, e.Name, own)
	}
}

// entry checks name in the directory dir and descends into it when it is
// a directory of the store that the walk may enter.
func (w *shapeWalk) entry(dir string, dp layout.Place, name string, own shapeOwner) {
	rel := dir + "/" + name
	st := w.stat(rel)
	if st == nil {
		return
	}
	if strings.HasPrefix(name, ".") {
		w.dot(dir, dp, name, st, own)
		return
	}
	p := layout.Classify(rel)
	switch {
	case !p.Exists():
		w.bad(rel, shapeNotHere)
		return
	case p.Kind == layout.PlaceCtl:
		w.bad(rel, "the control file is virtual: the store must not hold one")
		return
	}
	want := uint32(unix.S_IFREG)
	if p.IsDir() {
		want = unix.S_IFDIR
	}
	switch p.Kind {
	case layout.PlaceHome:
		// home/<uid> is its uid's (validUid made name a uid), 0700.
		uid, _ := strconv.ParseInt(name, 10, 64)
		own = homeShape(uid)
	case layout.PlaceSpace:
		// The space itself is root's to set up; its group is the one
		// everything below must have.
		if w.isType(rel, st, unix.S_IFDIR) {
			w.dir(rel, p, spaceShape(int64(st.Gid)))
		}
		return
	case layout.PlaceArchived:
		// Kept byte for byte as it was: directories and files of the
		// home's uid, whatever their modes.
		own = own.anyMode()
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			want = unix.S_IFDIR
		}
	}
	if !w.isType(rel, st, want) {
		return
	}
	if p.Kind == layout.PlaceFreeRoot || shapeArchivedContext(rel, p) {
		w.owned(rel, st, own) // a free tree is its user's
	} else {
		w.owned(rel, st, own.history())
	}
	if want != unix.S_IFDIR || p.Kind == layout.PlaceFreeRoot || shapeArchivedContext(rel, p) {
		return // a file, or a free tree: users keep anything there
	}
	w.dir(rel, p, own)
}

// dot checks a dot name, the store's own bookkeeping, in the directory dir
// (place dp). Dot entries belong to their surroundings; their modes are the
// engine's business.
func (w *shapeWalk) dot(dir string, dp layout.Place, name string, st *unix.Stat_t, own shapeOwner) {
	rel := dir + "/" + name
	own = own.history().anyMode()
	session := dp.Kind == layout.PlaceSession || shapeArchivedSession(dir, dp)
	switch {
	case storefs.IsReplaceTemp(name):
		w.leftover(rel, shapeLeftoverTmp)
	case dp.Kind == layout.PlaceSessions && layout.IsNewDir(name):
		if w.isType(rel, st, unix.S_IFDIR) {
			w.leftover(rel, shapeLeftoverNew) // not entered: half made
		}
	case shapeArchiveAgent(dir, dp) && layout.IsDelDir(name):
		if w.isType(rel, st, unix.S_IFDIR) {
			w.leftover(rel, shapeLeftoverDel) // not entered: half removed
		}
	case session && name == layout.SealDir:
		w.flat(rel, st, own, func(f string) bool { return shapeSealFiles[f] })
	case session && strings.HasSuffix(name, ".spare") && shapeSpared[strings.TrimSuffix(name[1:], ".spare")]:
		if w.isType(rel, st, unix.S_IFREG) {
			w.owned(rel, st, own)
		}
	case name == versions.SealFile && shapeVersionsDir(dir, dp):
		if w.isType(rel, st, unix.S_IFREG) {
			w.owned(rel, st, own) // what it vouches for, Verify checks
		}
	case (dp.Kind == layout.PlaceHome || dp.Kind == layout.PlaceSpace) && name == ".self_id":
		own.rootOK = true // the engine keeps it as root or as the home's owner
		w.flat(rel, st, own, func(string) bool { return true })
	case (dp.Kind == layout.PlaceHome || dp.Kind == layout.PlaceSpace) && name == layout.SearchDir:
		if w.isType(rel, st, unix.S_IFDIR) {
			w.derivedTree(rel)
		}
	case (dp.Kind == layout.PlaceHome || dp.Kind == layout.PlaceSpace) && name == ".self_id.rebuild":
		w.leftover(rel, "leftover temporary directory of an interrupted self_id rebuild")
	default:
		w.bad(rel, shapeNotHere)
	}
}

// flat checks a bookkeeping directory that holds only regular files whose
// names allow accepts (plus leftovers of interrupted replaces).
func (w *shapeWalk) flat(rel string, st *unix.Stat_t, own shapeOwner, allow func(string) bool) {
	if !w.isType(rel, st, unix.S_IFDIR) {
		return
	}
	w.owned(rel, st, own)
	for _, e := range w.list(rel) {
		f := rel + "/" + e.Name
		fst := w.stat(f)
		switch {
		case fst == nil:
		case storefs.IsReplaceTemp(e.Name):
			w.leftover(f, shapeLeftoverTmp)
		case !allow(e.Name):
			w.bad(f, shapeNotHere)
		case w.isType(f, fst, unix.S_IFREG):
			w.owned(f, fst, own)
		}
	}
}

// derivedTree checks the directory rel of a derived index that the engine
// rebuilds whenever it does not fit (the search index): names, owners,
// modes and leftovers do not matter there, only that it holds directories
// and regular files.
func (w *shapeWalk) derivedTree(rel string) {
	for _, e := range w.list(rel) {
		f := rel + "/" + e.Name
		st := w.stat(f)
		switch {
		case st == nil:
		case st.Mode&unix.S_IFMT == unix.S_IFDIR:
			w.derivedTree(f)
		default:
			w.isType(f, st, unix.S_IFREG)
		}
	}
}

// shapeArchivedSession reports whether rel (place p) is an archived session
// directory: home/<uid>/archived_sessions/<agent>/<session>.
func shapeArchivedSession(rel string, p layout.Place) bool {
	return p.Kind == layout.PlaceArchived && strings.Count(rel, "/") == 4
}

// shapeArchiveAgent reports whether rel (place p) is an agent's directory
// of a home's archive: home/<uid>/archived_sessions/<agent>.
func shapeArchiveAgent(rel string, p layout.Place) bool {
	return p.Kind == layout.PlaceArchived && strings.Count(rel, "/") == 3
}

// shapeArchivedContext reports whether rel is the context/ of an archived
// session: still a free tree, kept as the user left it.
func shapeArchivedContext(rel string, p layout.Place) bool {
	return p.Kind == layout.PlaceArchived && strings.Count(rel, "/") == 5 && strings.HasSuffix(rel, "/"+abi.DirContext)
}

// isType reports whether st is of type want (unix.S_IFREG or S_IFDIR), and
// reports it when not.
func (w *shapeWalk) isType(rel string, st *unix.Stat_t, want uint32) bool {
	if st.Mode&unix.S_IFMT == want {
		return true
	}
	w.bad(rel, storefs.TypeName(st.Mode)+", not "+storefs.TypeName(want))
	return false
}

// owned reports, in one line, an owner, group or mode that own does not
// allow.
func (w *shapeWalk) owned(rel string, st *unix.Stat_t, own shapeOwner) {
	var probs []string
	root := own.rootOK && st.Uid == 0
	orRoot := ""
	if own.rootOK {
		orRoot = " or root"
	}
	if own.uid >= 0 && int64(st.Uid) != own.uid && !root {
		probs = append(probs, fmt.Sprintf("owner %d:%d, expected %d (%s)%s", st.Uid, st.Gid, own.uid, own.who, orRoot))
	}
	if own.gid >= 0 && int64(st.Gid) != own.gid && !root {
		probs = append(probs, fmt.Sprintf("group %d, expected %d (the space's group)%s", st.Gid, own.gid, orRoot))
	}
	want, mode := own.fileMode, st.Mode&0o7777
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		want = own.dirMode
		if own.gid >= 0 {
			mode &^= unix.S_ISGID // a space's directories may pass its group on
		}
	}
	if want != 0 && mode != want {
		probs = append(probs, fmt.Sprintf("mode %04o, expected %04o", st.Mode&0o7777, want))
	}
	if len(probs) > 0 {
		w.bad(rel, strings.Join(probs, "; "))
	}
}

// stat describes rel without following it; nil when it cannot (reported),
// or when it vanished since it was listed (nothing left to report).
func (w *shapeWalk) stat(rel string) *unix.Stat_t {
	st, err := w.r.Lstat(rel)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			w.bad(rel, "cannot be examined: "+err.Error())
		}
		return nil
	}
	return st
}

// list is the entries of the directory rel, sorted by name; none when it
// cannot be listed (reported), or when it vanished since its stat (a
// session archived or deleted, a user's empty archived_sessions/<agent>/
// removed, beside a running server: nothing left to report).
func (w *shapeWalk) list(rel string) []storefs.Entry {
	ents, err := w.r.ReadDir(rel)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			w.bad(rel, "cannot be listed: "+err.Error())
		}
		return nil
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name < ents[j].Name })
	return ents
}

// shapeVersionsDir reports whether dir (place dp) is a session's
// versions/, live or archived: where the index's seal is.
func shapeVersionsDir(dir string, dp layout.Place) bool {
	if dp.Kind == layout.PlaceVersionsDir {
		return dp.File == abi.DirVersions
	}
	return dp.Kind == layout.PlaceArchived && path.Base(dir) == abi.DirVersions && shapeArchivedSession(path.Dir(dir), layout.Classify(path.Dir(dir)))
}
