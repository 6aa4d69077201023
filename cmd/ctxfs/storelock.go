package main

import (
	"cmp"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/mountlife"
	"github.com/ctxfs/ctxfs/internal/storefs"
)

// The store lock, <store>/.ctxfs.lock, makes sure one server serves a
// store at a time: a flock held for the server's life. A flock does not
// say who holds it, so its holder writes "pid\nroot\n" into the file, for
// the refusal to name; that content counts only while its pid lives and
// is not dying. The lock is a flock (not a POSIX lock, as the pid file's)
// because servers of earlier versions take it so.

// openStoreLock opens the store's lock file, through the store door.
func openStoreLock(st *storefs.Root) (*os.File, error) {
	return st.OpenFile(".ctxfs.lock", os.O_CREATE|os.O_RDWR, 0o600)
}

// refuseServedStore refuses a store that a live server holds, a
// single-host one or the hosts of a cluster; the lock is only tried, and
// let go of at once.
func refuseServedStore(st *storefs.Root) error {
	l, err := openStoreLock(st)
	if err != nil {
		return err
	}
	defer l.Close() // lets go of a lock we got
	for try := 1; ; try++ {
		if unix.Flock(int(l.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			return nil
		}
		if unix.Flock(int(l.Fd()), unix.LOCK_SH|unix.LOCK_NB) != nil {
			break // held exclusive: a single-host server, named below
		}
		// Held shared: by the hosts of a cluster (lockStoreShared), which
		// write no pid in the file, so what it holds names no live server;
		// or held exclusive a moment ago by another such check, which let
		// go between our two tries. Only a lock that stays shared is a
		// cluster's.
		if try == sharedTries {
			return fmt.Errorf("store %s is served by the hosts of a cluster; ctxfs umount each host first", st.Path())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if h := storeHolder(l); h.live() {
		return storeServedError(st.Path(), h)
	}
	return nil
}

// sharedTries is how often refuseServedStore finds the lock shared before
// it takes it for a cluster's.
const sharedTries = 3

// lockStore takes the store lock for this server of root. A live holder
// is refused at once; a dying one gets lockPatience to let go (a server
// killed in the kernel holds it until its dead connections are aborted,
// which its watchdog does, and we too in case it cannot: the holder's
// root, or ours when the holder did not say).
func lockStore(st *storefs.Root, root string) (*os.File, error) {
	l, err := openStoreLock(st)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(lockPatience)
	aborted := false
	for unix.Flock(int(l.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		h := storeHolder(l)
		if h.live() || time.Now().After(deadline) {
			l.Close()
			return nil, storeServedError(st.Path(), h)
		}
		if !aborted {
			abortDeadMounts(cmp.Or(h.label, root))
			aborted = true
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := l.Truncate(0); err != nil {
		l.Close()
		return nil, err
	}
	l.WriteAt([]byte(fmt.Sprintf("%d\n%s\n", os.Getpid(), root)), 0)
	return l, nil
}

// storeHolder reads the pid and root that the store lock's holder wrote.
func storeHolder(l *os.File) holder {
	pid, root := readLabel(l)
	if pid == 0 {
		return holder{dying: true} // unknown: wait for it
	}
	return holder{pid: pid, dying: mountlife.ProcessDying(pid), label: root}
}

// storeServedError is the refusal for a store that a server holds.
func storeServedError(store string, h holder) error {
	switch {
	case h.pid == 0:
		return fmt.Errorf("another ctxfs serves %s", store)
	case h.dying:
		return fmt.Errorf("store %s: pid %d (root %s) was killed but still holds it after %v", store, h.pid, h.label, lockPatience)
	}
	return fmt.Errorf("store %s is served by pid %d (root %s); ctxfs umount --root %s first", store, h.pid, h.label, h.label)
}
