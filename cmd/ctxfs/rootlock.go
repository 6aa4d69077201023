package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/mountlife"
)

// The pid file, <root>/agent/.ctxfs.pid, says which process serves a root.
// Its content ("pid\nstore\n") is only a label: what counts is the POSIX
// record lock on it. The server holds a write lock on serverByte for its
// whole life, and its watchdog holds watchdogByte until it has cleaned up
// after the server's death. The kernel drops a lock when its process is
// gone, so a held lock names a live (or dying) process, and F_GETLK says
// which: a pid left in the file after a kill -9, perhaps reused by an
// unrelated process since, is never taken for a server.
//
// POSIX locks belong to the process and go away when it closes any
// descriptor of the file, so the server opens the file exactly once.
const (
	serverByte   = 0
	watchdogByte = 1
)

// lockPatience is how long a server waits for a dying server of its root
// or store (or that server's watchdog) to be gone.
const lockPatience = 5 * time.Second

// pidFile is where a serving ctxfs leaves its pid, for `ctxfs umount`.
func pidFile(root string) string { return filepath.Join(root, "agent", ".ctxfs.pid") }

// holder is the process that serves a root or a store, as its lock says.
type holder struct {
	pid   int    // 0: nobody
	dying bool   // killed, not gone yet: its mounts are dead
	named int    // the pid the file names (pid file): the same, for a server
	label string // the store it serves (pid file) or the root it serves (store lock)
}

// live reports whether a server holds the lock and is not dying.
func (h holder) live() bool { return h.pid != 0 && !h.dying }

// servedError is the refusal for a root that a live server serves.
func servedError(root string, h holder) error {
	return fmt.Errorf("%s is served by pid %d (store %s); ctxfs umount --root %s first", root, h.pid, h.label, root)
}

// rootHolder reads who serves root. watchdog is the pid of a dead
// server's watchdog that is still cleaning up (0 when none). The root may
// be a user's (clean-stale asks of every mount that says it is ctxfs), so
// the pid file is opened without waiting (a FIFO there would hold root's
// clean-stale in open for ever) and anything but a regular file is EINVAL.
func rootHolder(root string) (h holder, watchdog int, err error) {
	f, err := os.OpenFile(pidFile(root), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return holder{}, 0, nil
	}
	if err != nil {
		return holder{}, 0, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return holder{}, 0, &fs.PathError{Op: "open", Path: f.Name(), Err: unix.EINVAL}
	}
	return holderOf(f), lockedBy(f, watchdogByte), nil
}

// holderOf reads the pid file f: the process that holds its server lock.
func holderOf(f *os.File) holder {
	pid := lockedBy(f, serverByte)
	if pid == 0 {
		return holder{}
	}
	named, store := readLabel(f)
	return holder{pid: pid, dying: mountlife.ProcessDying(pid), named: named, label: store}
}

// readLabel reads "pid\nlabel\n", what the holder of a pid file or of
// the store lock wrote there.
func readLabel(f *os.File) (pid int, label string) {
	b := make([]byte, 4096)
	n, _ := f.ReadAt(b, 0)
	pidLine, rest, _ := strings.Cut(string(b[:n]), "\n")
	pid, err := strconv.Atoi(pidLine)
	if err != nil || pid < 0 {
		pid = 0
	}
	return pid, strings.TrimSuffix(rest, "\n")
}

// lockedBy returns the pid of the process holding a lock on byte b of f,
// or 0.
func lockedBy(f *os.File, b int64) int {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: b, Len: 1}
	if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk); err != nil || lk.Type == unix.F_UNLCK {
		return 0
	}
	return int(lk.Pid)
}

// setLock takes (F_WRLCK) or drops (F_UNLCK) a lock on n bytes of f from
// b, without waiting.
func setLock(f *os.File, typ int16, b, n int64) error {
	lk := unix.Flock_t{Type: typ, Whence: 0, Start: b, Len: n}
	return unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk)
}

// lockRoot makes this process the one server of root: it takes the
// server lock of root's pid file and writes its pid and store there. A
// live server of root is refused at once; a dying one (or its watchdog)
// gets lockPatience to be gone, its dead mounts aborted meanwhile in case
// no watchdog does it.
func lockRoot(root, store string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(pidFile(root)), 0o755); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(lockPatience)
	aborted := false
	for {
		f, err := tryLockRoot(root)
		if err != nil {
			return nil, err
		}
		if f != nil {
			if err := writeLabel(f, store); err != nil {
				f.Close()
				return nil, err
			}
			return f, nil
		}
		h, watchdog, err := rootHolder(root)
		switch {
		case err != nil:
			return nil, err
		case h.live():
			return nil, servedError(root, h)
		case time.Now().After(deadline):
			return nil, fmt.Errorf("%s: a killed server (pid %d) or its watchdog (pid %d) still holds %s after %v", root, h.pid, watchdog, pidFile(root), lockPatience)
		case !aborted:
			abortDeadMounts(root)
			aborted = true
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// tryLockRoot takes root's server lock if nobody holds it nor the
// watchdog byte; it returns nil, nil when someone does.
func tryLockRoot(root string) (*os.File, error) {
	f, err := os.OpenFile(pidFile(root), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	// Both bytes at once: a dead server's watchdog must have finished
	// before a new server mounts. Then byte 1 is left to our own watchdog.
	if setLock(f, unix.F_WRLCK, serverByte, 2) != nil {
		f.Close()
		return nil, nil
	}
	setLock(f, unix.F_UNLCK, watchdogByte, 1)
	if !samePath(f, pidFile(root)) { // its last holder removed it meanwhile
		f.Close()
		return tryLockRoot(root)
	}
	return f, nil
}

// writeLabel writes "pid\nstore\n" into the locked pid file f.
func writeLabel(f *os.File, store string) error {
	f.Chmod(0o600)
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(fmt.Sprintf("%d\n%s\n", os.Getpid(), store)), 0)
	return err
}

// unlockRoot removes the pid file and lets go of the lock, in that order:
// a server waiting for the lock then finds the file gone and makes a new
// one (tryLockRoot), so that no server ever holds a lock on a removed file.
func unlockRoot(root string, f *os.File) {
	if samePath(f, pidFile(root)) {
		os.Remove(pidFile(root))
	}
	f.Close()
}

// samePath reports whether f is the file at path.
func samePath(f *os.File, path string) bool {
	a, err1 := f.Stat()
	b, err2 := os.Lstat(path)
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}

// abortDeadMounts aborts the connections of root's mounts that do not
// answer; mounts that answer are left alone.
func abortDeadMounts(root string) {
	for _, d := range []string{filepath.Join(root, "home"), filepath.Join(root, "shared")} {
		mountlife.AbortDead(d)
	}
}
