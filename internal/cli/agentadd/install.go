package agentadd

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
)

// stagePrefix starts the names of what add stages in agent/: the loader
// takes no name that starts with a dot for a definition.
const stagePrefix = ".ctx-add."

// install writes the program link, then the definition directory: the
// server sees a definition only once NAME.d/ is there, and then it is
// whole. Without --force an agent already there (program or NAME.d) is
// EEXIST and nothing is written; a failure removes what was staged.
func (r *request) install(agents, bin string) error {
	program := filepath.Join(agents, r.name)
	def := program + ".d"
	if !r.force {
		for _, p := range []string{program, def} {
			if _, err := os.Lstat(p); err == nil {
				return abi.Errorf(syscall.EEXIST, "", "agent %s exists (%s); --force replaces it", r.name, p)
			}
		}
	} else if st, err := os.Lstat(def); err == nil && !st.IsDir() {
		return abi.Errorf(syscall.ENOTDIR, "", "%s is not a directory: remove it first", def)
	}
	stage, err := r.stage(agents)
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage) // after a swap, the old definition
	link, err := stageLink(agents, bin)
	if err != nil {
		return err
	}
	defer os.Remove(link) // a no-op once renamed into place
	if err := r.place(link, program); err != nil {
		return err
	}
	if err := r.placeDir(stage, def); err != nil {
		if !r.force {
			os.Remove(program) // ours alone: it was not there before
		}
		return err
	}
	return nil
}

// stage writes NAME.d's files into a new hidden directory in agent/.
func (r *request) stage(agents string) (string, error) {
	stage, err := os.MkdirTemp(agents, stagePrefix)
	if err != nil {
		return "", hostErr(err)
	}
	names := make([]string, 0, len(r.files))
	for n := range r.files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(stage, n), []byte(r.files[n]+"\n"), 0o644); err != nil {
			os.RemoveAll(stage)
			return "", hostErr(err)
		}
	}
	if err := os.Chmod(stage, 0o755); err != nil {
		os.RemoveAll(stage)
		return "", hostErr(err)
	}
	return stage, nil
}

// stageLink makes a hidden symbolic link to bin in agent/.
func stageLink(agents, bin string) (string, error) {
	f, err := os.CreateTemp(agents, stagePrefix)
	if err != nil {
		return "", hostErr(err)
	}
	link := f.Name()
	f.Close()
	os.Remove(link)
	if err := os.Symlink(bin, link); err != nil {
		return "", hostErr(err)
	}
	return link, nil
}

// place renames the staged link to the program's path: over an existing
// program only with --force.
func (r *request) place(link, program string) error {
	if r.force {
		return hostErr(os.Rename(link, program))
	}
	return renameNoReplace(link, program)
}

// placeDir renames the staged NAME.d into place. With --force and an
// existing NAME.d the two are exchanged in one step (the old one then is
// at stage, which install removes): a run never sees a mix of both.
func (r *request) placeDir(stage, def string) error {
	if r.force {
		err := unix.Renameat2(unix.AT_FDCWD, stage, unix.AT_FDCWD, def, unix.RENAME_EXCHANGE)
		if !errors.Is(err, syscall.ENOENT) {
			return hostErr(err)
		}
	}
	return renameNoReplace(stage, def)
}

// renameNoReplace renames old to new, EEXIST when new appeared meanwhile.
func renameNoReplace(old, new string) error {
	err := unix.Renameat2(unix.AT_FDCWD, old, unix.AT_FDCWD, new, unix.RENAME_NOREPLACE)
	if errors.Is(err, syscall.EEXIST) {
		return abi.Errorf(syscall.EEXIST, "", "%s exists; --force replaces it", new)
	}
	return hostErr(err)
}

// hostErr is a host error as an abi error of its errno, nil for nil.
func hostErr(err error) error {
	if err == nil {
		return nil
	}
	return abi.Errorf(abi.Errno(err), "", "%v", err)
}
