package storefs

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The mount root is held to the store's rule, for the same reason: the
// server, as root, reads definitions under ROOT/agent and ROOT/model
// (programs it starts, endpoints it sends keys to, environments) and makes
// its sockets there. A user who could change any of them, or a directory
// above, could have the server run, send or chmod what they chose.

// OpenToOthersError is a directory (or a file the server reads) that
// someone besides root and the server's uid could change.
type OpenToOthersError struct {
	What string // what was checked, e.g. "mount root /ctx"
	Path string // the offending directory or file
	Who  string // who could change it (OtherWriter)
}

// Problem says what is wrong, without What.
func (e *OpenToOthersError) Problem() string {
	return fmt.Sprintf("%s is writable by %s, who could change what the server, as root, reads, runs and creates there", e.Path, e.Who)
}

// Fix is the command that makes Path safe.
func (e *OpenToOthersError) Fix() string {
	return fmt.Sprintf("chown root:root %s && chmod go-w %s", e.Path, e.Path)
}

func (e *OpenToOthersError) Error() string {
	return fmt.Sprintf("%s: %s; fix: %s", e.What, e.Problem(), e.Fix())
}

func (e *OpenToOthersError) Unwrap() error { return unix.EACCES }

// CheckRoot refuses a mount root that anyone besides root and me could
// change: root, root/agent and root/model must be owned by root or me and
// writable by no one else (not even when sticky), and every directory
// above root must be too, except that a sticky one (as /tmp is) is fine.
// No symlink is followed on the way (a *SymlinkError). What does not exist
// yet is checked where it would be made, so a refusal leaves nothing
// created.
func CheckRoot(root string, me uint32) error {
	root = filepath.Clean(root)
	what := "mount root " + root
	if err := checkOwnedDir(what, root, me); err != nil {
		return err
	}
	for _, sub := range []string{"agent", "model"} {
		if err := checkOwnedDir(what, filepath.Join(root, sub), me); err != nil {
			return err
		}
	}
	return nil
}

// checkOwnedDir walks dir without following symlinks: the directories
// above it must pass OtherWriter, dir itself AnyOtherWriter.
func checkOwnedDir(what, dir string, me uint32) error {
	return named(what, WalkNoFollow(dir, func(step string, _ int, st *unix.Stat_t) error {
		who := OtherWriter(st, me)
		if step == dir {
			who = AnyOtherWriter(st, me)
		}
		if who != "" {
			return &OpenToOthersError{What: what, Path: step, Who: who}
		}
		return nil
	}))
}
