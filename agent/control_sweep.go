package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// A run's control socket lives in a directory of root's in the system's
// temporary directory, named for the server that made it
// (controlPrefix, the server's pid, a random part). The run removes it
// when it ends; a server killed (SIGKILL, a crash) cannot, so the next
// server that starts removes those of servers that are gone.

// controlPrefix begins the name of every control directory.
const controlPrefix = "ctxfs-control-"

// controlPattern is the os.MkdirTemp pattern of this server's control
// directories.
func controlPattern() string { return controlPrefix + strconv.Itoa(os.Getpid()) + "-*" }

// SweepControls removes the control directories that servers no longer
// running left in dir (os.TempDir when empty), and returns how many. It
// removes only a directory of root's (never a link, never another user's:
// anyone may make a name in /tmp, and in a sticky /tmp no one but root
// can swap a directory of root's for something else), named for a pid
// that no process has now.
func SweepControls(dir string) int {
	if dir == "" {
		dir = os.TempDir()
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		pid, ok := controlPid(e.Name())
		if !ok || !e.IsDir() || unix.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		p := filepath.Join(dir, e.Name())
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != 0 {
			continue
		}
		if err := os.RemoveAll(p); err == nil || errors.Is(err, os.ErrNotExist) {
			n++
		}
	}
	return n
}

// controlPid is the pid a control directory's name gives.
func controlPid(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, controlPrefix)
	if !ok {
		return 0, false
	}
	digits, _, ok := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(digits)
	return pid, ok && err == nil && pid > 0
}
