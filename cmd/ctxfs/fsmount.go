package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

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

// Unmount unmounts the server's own mounts and nothing else, ends their
// connections (mountlife.Conn.End: copies of the mounts in other mount
// namespaces would otherwise keep them, and this wait, alive as long as
// they live), and waits, for at most endWait, until their requests have
// ended. A mount taken away (an external umount) or mounted over is left
// alone: its path names someone else's mount now.
func (m fuseMounts) Unmount() error {
	m.Stopping()
	for _, c := range m.conns {
		c.End()
	}
	select {
	case <-m.done:
		return nil
	case <-time.After(endWait):
		return fmt.Errorf("the FUSE connections were still open %v after the unmount (a request still being answered, or copies of the mounts in another mount namespace and no fusectl to end them); they end with this process", endWait)
	}
}

// endWait bounds how long a stop waits for the requests in flight at the
// unmount (a handler still running) before it closes the engine anyway.
const endWait = 5 * time.Second
