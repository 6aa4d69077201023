package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// defWatch tells the sockets' loop when a definition may have come or
// gone: inotify on ROOT/agent, ROOT/model and each ROOT/model/PROVIDER.
// An event carries no information the loop uses: any event (and a queue
// overflow) only asks for one rescan, and requests coalesce in a channel
// of one, so however many events arrive (a flood of mkdir and rmdir by
// root), they cost a bounded number of rescans, never memory. The
// directories are root's (issue 19), but the number of watched
// providers is bounded anyway; past maxWatchedDirs, and wherever inotify
// fails (no instances or watches left), the periodic rescan still finds
// every change.
type defWatch struct {
	f       *os.File       // the inotify descriptor, in the runtime's poller: Close ends Read
	fd      int            // the same, for inotify_add_watch (f.Fd() would make it blocking)
	watched map[string]int // watch descriptor by directory; owned by the sockets' loop
	warned  bool           // a failure to watch was logged once
}

// maxWatchedDirs bounds the directories watched: ROOT/agent, ROOT/model
// and the providers.
const maxWatchedDirs = 1024

// defEvents: what changes the names in a watched directory, or the
// directory itself.
const defEvents = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// newDefWatch starts an inotify instance (nil and the error when the
// kernel refuses one: the periodic rescan then does all the work).
func newDefWatch() (*defWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, err
	}
	// Non-blocking, so os.File reads it through the poller and Close
	// wakes a pending Read.
	return &defWatch{f: os.NewFile(uintptr(fd), "inotify"), fd: fd, watched: map[string]int{}}, nil
}

// events reads events until the descriptor is closed, asking for a
// rescan (without waiting) after each batch.
func (w *defWatch) events(rescan chan<- struct{}) {
	buf := make([]byte, 64<<10) // many events per read; the events themselves are not kept
	for {
		if _, err := w.f.Read(buf); err != nil {
			return // closed (EAGAIN is the poller's); after any other failure the periodic rescan serves alone
		}
		select {
		case rescan <- struct{}{}:
		default: // one is pending already
		}
	}
}

// watch makes dirs the watched set: new ones are added, and ones no
// longer wanted dropped. Adding a directory that is watched already is
// cheap and keeps its descriptor, and it is done every time: a
// directory removed and made again under the same name is another inode,
// which the old descriptor does not watch. It returns the first failure.
func (w *defWatch) watch(dirs []string) error {
	var first error
	if len(dirs) > maxWatchedDirs {
		first = fmt.Errorf("%d definition directories, only the first %d watched", len(dirs), maxWatchedDirs)
		dirs = dirs[:maxWatchedDirs]
	}
	fd := w.fd
	want := make(map[string]bool, len(dirs))
	for _, d := range dirs {
		want[d] = true
		wd, err := unix.InotifyAddWatch(fd, d, defEvents)
		if err != nil {
			if first == nil && !errors.Is(err, unix.ENOENT) {
				first = &os.PathError{Op: "inotify_add_watch", Path: d, Err: err}
			}
			delete(w.watched, d)
			continue
		}
		w.watched[d] = wd
	}
	for d, wd := range w.watched {
		if !want[d] {
			unix.InotifyRmWatch(fd, uint32(wd)) // EINVAL when the directory is gone: its watch went with it
			delete(w.watched, d)
		}
	}
	return first
}

// close ends events and releases the watches.
func (w *defWatch) close() { w.f.Close() }

// definitionDirs are the directories whose entries are definitions:
// ROOT/agent, ROOT/model (new providers) and each provider, sorted.
func definitionDirs(root string) []string {
	models := filepath.Join(root, "model")
	dirs := []string{filepath.Join(root, "agent"), models}
	ents, _ := os.ReadDir(models) // a missing or unreadable model/ is watched alone; the rescan reports it
	for _, e := range ents {
		if p := filepath.Join(models, e.Name()); isDir(p) {
			dirs = append(dirs, p)
		}
	}
	return dirs
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
