package main

import (
	"os"

	ctxfs "github.com/ctxfs/ctxfs/fs"
	"github.com/ctxfs/ctxfs/session"
)

// mounted is what serve needs of the FUSE mounts.
type mounted interface {
	Unmount() error
	Done() <-chan struct{}
}

// fuseMounts adapts fs.Mounts: Done closes when the kernel ends either
// mount (an external umount), so that the server exits instead of serving
// half a tree.
type fuseMounts struct {
	*ctxfs.Mounts
	done chan struct{}
}

func (m fuseMounts) Done() <-chan struct{} { return m.done }

func mountFS(e *session.Engine, root string) (mounted, error) {
	ms, err := ctxfs.Mount(e, root, ctxfs.Options{Debug: os.Getenv("CTXFS_DEBUG") != ""})
	if err != nil {
		return nil, err
	}
	m := fuseMounts{ms, make(chan struct{})}
	go func() { ms.Wait(); close(m.done) }()
	return m, nil
}
