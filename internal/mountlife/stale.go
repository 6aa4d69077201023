package mountlife

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/mountinfo"
)

// fusectl is where the kernel's FUSE control filesystem is mounted.
const fusectl = "/sys/fs/fuse/connections"

// FSType is what the kernel lists for a ctxfs mount ("fuse." + the
// MountOptions Name of mountOptions).
const FSType = mountinfo.FSTypeCtxfs

// staleProbe is how long a mount may take to answer a stat before it
// counts as dead.
const staleProbe = time.Second

// CleanStale makes dir usable again when a dead FUSE mount is left there:
// a mount that does not answer (its connection ended, or no answer within
// a second to an open of its root: see probe) has its connection
// aborted through fusectl, then is detached. A mount that answers is left alone: it has a
// live server, which may be another root's or not ctxfs at all, and
// detaching it would pull the tree from under that server's callers.
//
// The abort matters after a SIGKILL: a server thread that was sending the
// kernel an invalidation (NotifyContent) may wait, uninterruptibly, for a
// page that a reader's pending READ holds locked. That thread cannot die,
// so the server's /dev/fuse descriptor is never closed, the connection is
// never ended, and every process that touches the old mount (a `tail -f`,
// its exit) hangs in D state for ever. Aborting the connection fails the
// pending requests, which frees them all. A plain detach would leave them
// hanging.
//
// It returns how many dead mounts it detached (dead mounts can be stacked
// at one directory), so that callers can say what they removed.
func CleanStale(dir string) (detached int) {
	dir = filepath.Clean(dir)
	for {
		dev, ok := fuseMountAt(dir)
		if !ok || probe(dir, dev) != dead {
			return detached
		}
		abortConn(dev)
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			return detached
		}
		detached++
	}
}

// IsFUSEMount reports whether a FUSE filesystem is mounted at dir.
func IsFUSEMount(dir string) bool {
	_, ok := fuseMountAt(filepath.Clean(dir))
	return ok
}

// LiveFUSEMount reports whether a FUSE mount at dir answers: then
// something serves it, and nothing here may touch it.
func LiveFUSEMount(dir string) bool {
	dev, ok := fuseMountAt(filepath.Clean(dir))
	return ok && probe(dir, dev) == live
}

// AbortDead aborts the connection of a FUSE mount at dir that does not
// answer, and leaves the mount itself in place. It is safe to call before
// knowing whether dir is ours to replace: a live mount is left alone.
// A server killed in the middle of an invalidation holds everything it
// had open (its store lock too) until its connection is aborted.
func AbortDead(dir string) {
	if dev, ok := fuseMountAt(filepath.Clean(dir)); ok && probe(dir, dev) == dead {
		abortConn(dev)
	}
}

// CleanDeadCtxfs cleans every ctxfs mount of this mount namespace that no
// live server answers for (CI leftovers), and returns the directories it
// cleaned. keep says which mounts to leave alone all the same (a live
// server owns them although it is slow to answer, or they are outside
// what the caller cleans); other filesystems, FUSE or not, are never
// touched. Every probe of a dead mount ends within staleProbe: the abort
// that follows frees it.
func CleanDeadCtxfs(keep func(dir string) bool) []string {
	var cleaned []string
	ms := fuseMounts()
	for i := len(ms) - 1; i >= 0; i-- { // topmost first: a probe reaches only the top
		c := Conn{Dir: ms[i].Dir, Dev: ms[i].Dev}
		if ms[i].FSType != FSType || !c.OnTop() || keep(c.Dir) || probe(c.Dir, c.Dev) != dead {
			continue
		}
		c.abort()
		if c.detach() {
			cleaned = append(cleaned, c.Dir)
		}
	}
	return cleaned
}

// state is what a probe of a listed FUSE mount found.
type state int

const (
	live   state = iota // its server answered
	dead                // its connection ended, or no answer within staleProbe
	hidden              // what the path shows is not this mount (a mount over it, or it was detached meanwhile)
)

// probe asks the server of the FUSE mount dev listed at dir whether it
// answers within staleProbe. It opens the directory: the kernel always
// asks the server for that (a stat could be answered from its attribute
// cache). Any reply counts, an error too (a live server whose store went
// away answers EIO or ENOENT); only an ended connection (ENOTCONN,
// ECONNABORTED once aborted) or silence means dead. A directory that
// opens on another device was not answered by this mount at all: the
// listing can name a mount that a lazy detach has just taken out of the
// path, or one hidden under another mount, and neither is a live server
// here nor a dead mount to abort. A probe left waiting on a dead mount
// returns once the connection is aborted.
func probe(dir string, dev [2]uint64) state {
	done := make(chan state, 1)
	go func() {
		fd, err := unix.Openat2(unix.AT_FDCWD, dir, &probeHow)
		switch {
		case errors.Is(err, unix.ENOTCONN) || errors.Is(err, unix.ECONNABORTED):
			done <- dead
		case err != nil:
			done <- live
		default:
			f := os.NewFile(uintptr(fd), dir)
			done <- openedOn(f, dev)
			f.Close()
		}
	}()
	select {
	case s := <-done:
		return s
	case <-time.After(staleProbe):
		return dead
	}
}

// probeHow is how probe opens a mount's directory. The mount table names
// no symlink, so a link met on the way was put there since: by a user who
// swapped a directory of theirs above their own mount for a link once
// clean-stale had listed it. The open reaches a directory, never what a
// link leads to, nor a FIFO (root held in open) or a device whose open
// acts (/dev/watchdog); ELOOP or ENOTDIR count as an answer, as any
// error but an ended connection does: not a dead mount to take.
var probeHow = unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS}

// openedOn says whether the open directory f is on the device dev.
func openedOn(f *os.File, dev [2]uint64) state {
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) == nil && st.Dev != unix.Mkdev(uint32(dev[0]), uint32(dev[1])) {
		return hidden
	}
	return live
}

// abortConn ends the FUSE connection whose device is dev, and returns how
// many requests were waiting on it ("" when it was already gone). fusectl
// is mounted when it is not; a second try covers someone unmounting it
// in between (tests put it back as they found it).
func abortConn(dev [2]uint64) string {
	name := connControl(dev)
	for try := 0; try < 2; try++ {
		if _, err := os.Stat(name); errors.Is(err, os.ErrNotExist) {
			mountFusectl()
		}
		waiting, err := os.ReadFile(filepath.Join(name, "waiting"))
		if err == nil && os.WriteFile(filepath.Join(name, "abort"), []byte("1\n"), 0) == nil {
			return strings.TrimSpace(string(waiting))
		}
	}
	return ""
}

// connControl is the fusectl directory of the connection whose device is
// dev (fusectl names it by the kernel's dev_t: major<<20 | minor).
func connControl(dev [2]uint64) string {
	return filepath.Join(fusectl, strconv.FormatUint(dev[0]<<20|dev[1], 10))
}

// mountFusectl mounts the FUSE control filesystem (it may not be).
func mountFusectl() { unix.Mount("fusectl", fusectl, "fusectl", 0, "") }

// fuseMounts lists the FUSE mounts of this mount namespace in mountinfo
// order: of two mounts at one directory, the later is on top.
func fuseMounts() []mountinfo.Mount {
	all, _ := mountinfo.Read()
	var ms []mountinfo.Mount
	for _, m := range all {
		if m.IsFUSE() {
			ms = append(ms, m)
		}
	}
	return ms
}

// fuseMountAt finds the topmost FUSE mount at dir and returns its device
// (major, minor).
func fuseMountAt(dir string) (dev [2]uint64, ok bool) {
	m, ok := topFUSEAt(dir)
	return m.Dev, ok
}

// topFUSEAt is the topmost FUSE mount at dir.
func topFUSEAt(dir string) (top mountinfo.Mount, ok bool) {
	for _, m := range fuseMounts() {
		if m.Dir == dir {
			top, ok = m, true // the last one listed is on top
		}
	}
	return top, ok
}
