package session

import (
	"path"
	"sort"
	"strings"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
)

// homes lists the homes and shared spaces of a store ("home/1000",
// "shared/team"), sorted: the directories below home/ and shared/.
func homes(root *storefs.Root) []string {
	var out []string
	for _, top := range []string{"home", "shared"} {
		for _, name := range subdirs(root, top) {
			out = append(out, top+"/"+name)
		}
	}
	sort.Strings(out)
	return out
}

// sessionDirs lists the session directories of one home or space (store
// paths, sorted): agent and model sessions, and with archived the archived
// sessions of a private home. It walks directories only, never a symlink,
// and skips names the ABI does not allow there (index, dot names).
func sessionDirs(root *storefs.Root, home string, archived bool) []string {
	var containers []string
	for _, a := range subdirs(root, home+"/"+abi.KindAgent) {
		containers = append(containers, path.Join(home, abi.KindAgent, a, "session"))
	}
	for _, p := range subdirs(root, home+"/"+abi.KindModel) {
		for _, m := range subdirs(root, path.Join(home, abi.KindModel, p)) {
			if strings.HasSuffix(m, ".d") {
				containers = append(containers, path.Join(home, abi.KindModel, p, m, "session"))
			}
		}
	}
	if archived && strings.HasPrefix(home, "home/") {
		for _, a := range subdirs(root, home+"/archived_sessions") {
			containers = append(containers, path.Join(home, abi.ArchivedDir, a))
		}
	}
	var out []string
	for _, c := range containers {
		for _, s := range subdirs(root, c) {
			if abi.ValidSessionName(s) {
				out = append(out, c+"/"+s)
			}
		}
	}
	sort.Strings(out)
	return out
}

// subdirs lists the directories in dir whose names are valid ABI names
// (by getdents' type: a symlink is not a directory); nothing when dir
// cannot be read.
func subdirs(root *storefs.Root, dir string) []string {
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
