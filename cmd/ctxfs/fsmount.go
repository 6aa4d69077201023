package main

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	ctxfs "github.com/ctxfs/ctxfs/fs"
	"github.com/ctxfs/ctxfs/internal/mountlife"
	"github.com/ctxfs/ctxfs/session"
)

// mounted is what serve needs of the FUSE mounts.
type mounted interface {
	Unmount() error
	Done() <-chan struct{}
	Conns() []mountlife.Conn
}

// fuseMounts adapts fs.Mounts: Done closes when the kernel ends either
// mount (an external umount), so that the server exits instead of serving
// half a tree.
type fuseMounts struct {
	*ctxfs.Mounts
	done  chan struct{}
	conns []mountlife.Conn // home and shared, as mounted
}

func (m fuseMounts) Done() <-chan struct{} { return m.done }

// Conns are the server's connections, for its watchdog.
func (m fuseMounts) Conns() []mountlife.Conn { return m.conns }

// The engine answers every call fs makes (fs.Engine): checked here, where
// both may be imported.
var _ ctxfs.Engine = (*session.Engine)(nil)

func mountFS(e ctxfs.Engine, root string) (mounted, error) {
	ms, err := ctxfs.Mount(e, root, ctxfs.Options{Debug: os.Getenv("CTXFS_DEBUG") != ""})
	if err != nil {
		return nil, err
	}
	m := fuseMounts{Mounts: ms, done: make(chan struct{})}
	for _, d := range []string{"home", "shared"} {
		c, ok := mountlife.ConnAt(filepath.Join(root, d))
		if !ok {
			ms.Unmount()
			return nil, fmt.Errorf("%s: not mounted after mounting it", c.Dir)
		}
		m.conns = append(m.conns, c)
	}
	go func() { ms.Wait(); close(m.done) }()
	return m, nil
}

// Unmount unmounts the server's own mounts and nothing else. Unmounting is
// by path: once a mount of ours was taken away (an external umount), or
// another was mounted over it, the path names someone else's mount. So the
// usual unmount of both runs only while both are still ours on top;
// otherwise each that still is gets unmounted alone. A mount that is busy
// (a `tail -f` reading it, a shell whose directory is in it) is detached
// lazily: left in place, it would be dead the moment this process exits.
func (m fuseMounts) Unmount() error {
	own := 0
	for _, c := range m.conns {
		if c.OnTop() {
			own++
		}
	}
	if own == len(m.conns) && m.Mounts.Unmount() == nil {
		return nil
	}
	for _, c := range m.conns {
		if c.OnTop() && unix.Unmount(c.Dir, 0) != nil {
			unix.Unmount(c.Dir, unix.MNT_DETACH) // busy: ours all the same
		}
	}
	return nil
}
