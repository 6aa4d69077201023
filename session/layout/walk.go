package layout

import (
	"path"
	"sort"
	"strings"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"golang.org/x/sys/unix"
)

// Homes lists the homes and shared spaces of a store ("home/1000",
// "shared/team"), sorted: the directories below home/ and shared/.
func Homes(root *storefs.Root) []string {
	var out []string
	for _, top := range []string{"home", "shared"} {
		for _, name := range Subdirs(root, top) {
			out = append(out, top+"/"+name)
		}
	}
	sort.Strings(out)
	return out
}

// HomeSessionDirs lists the session directories of one home or space (store
// paths, sorted): agent and model sessions, and with archived the archived
// sessions of a private home. It walks directories only, never a symlink,
// and skips names the ABI does not allow there (index, dot names).
func HomeSessionDirs(root *storefs.Root, home string, archived bool) []string {
	var containers []string
	for _, a := range Subdirs(root, home+"/"+abi.KindAgent) {
		containers = append(containers, path.Join(home, abi.KindAgent, a, "session"))
	}
	for _, p := range Subdirs(root, home+"/"+abi.KindModel) {
		for _, m := range Subdirs(root, path.Join(home, abi.KindModel, p)) {
			if strings.HasSuffix(m, ".d") {
				containers = append(containers, path.Join(home, abi.KindModel, p, m, "session"))
			}
		}
	}
	if archived {
		containers = append(containers, ArchiveDirs(root, home)...)
	}
	var out []string
	for _, c := range containers {
		for _, s := range Subdirs(root, c) {
			if abi.ValidSessionName(s) {
				out = append(out, c+"/"+s)
			}
		}
	}
	sort.Strings(out)
	return out
}

// ArchiveDirs lists the agents' directories of a private home's archive
// (archived_sessions/<agent>, store paths, sorted); none for a shared
// space, which has no archive (SPEC 2).
func ArchiveDirs(root *storefs.Root, home string) []string {
	if !strings.HasPrefix(home, "home/") {
		return nil
	}
	var out []string
	for _, a := range Subdirs(root, home+"/"+abi.ArchivedDir) {
		out = append(out, path.Join(home, abi.ArchivedDir, a))
	}
	return out
}

// IsDir reports whether rel is a directory (not a link to one).
func IsDir(root *storefs.Root, rel string) bool {
	st, err := root.Lstat(rel)
	return err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
}

// Subdirs lists the directories in dir whose names are valid ABI names
// (by getdents' type: a symlink is not a directory); nothing when dir
// cannot be read.
func Subdirs(root *storefs.Root, dir string) []string {
	ents, err := root.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		name := e.Name
		if e.IsDir() && abi.ValidName(strings.TrimSuffix(name, ".d")) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// SessionDirs lists the session directories of a store, live and
// archived, as store paths, sorted.
func SessionDirs(root *storefs.Root) []string {
	var dirs []string
	for _, h := range Homes(root) {
		dirs = append(dirs, HomeSessionDirs(root, h, true)...)
	}
	return dirs
}

// NewDirPrefix starts the name of the hidden directory in which createDir
// builds a session: ".new-<session>-<random>".
const NewDirPrefix = ".new-"

// DelDirPrefix starts the name under which a deleted session waits to be
// removed (session/archive): ".del-<session>-<random>".
const DelDirPrefix = ".del-"

// IsNewDir reports whether name is a leftover of an interrupted creation
// or deletion of a session: removing it finishes or undoes that whole.
func IsNewDir(name string) bool {
	return leftoverOf(name, NewDirPrefix) || IsDelDir(name)
}

// IsDelDir reports whether name is a leftover of an interrupted deletion
// of a session, live or archived: removing it finishes that.
func IsDelDir(name string) bool { return leftoverOf(name, DelDirPrefix) }

// leftoverOf reports whether name is prefix, a session's name, a dash and
// a random suffix.
func leftoverOf(name, prefix string) bool {
	rest, ok := strings.CutPrefix(name, prefix)
	i := strings.LastIndexByte(rest, '-')
	return ok && i > 0 && i < len(rest)-1 && abi.ValidSessionName(rest[:i])
}
