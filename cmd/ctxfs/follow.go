package main

import (
	"log/slog"
	"os"

	"github.com/ctxfs/ctxfs/cluster/replica"
	ctxfs "github.com/ctxfs/ctxfs/fs"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/server"
	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/layout"
)

// `ctxfs mount --follow` serves a store another server writes (the
// writer host of a cluster, cluster/): the whole tree, read-only, from the
// store files (cluster/replica). It takes no store lock (the writer holds
// it), serves no socket, and writes nothing in the store: no ways
// recorded, no log there (--log-file or --foreground), no leftovers
// cleaned.

// A follower answers every call fs makes, as the writer does.
var _ ctxfs.Engine = (*replica.Replica)(nil)

// followFlagHelp says what --follow does.
const followFlagHelp = "serve a store another server writes, read-only (a cluster's follower host): no store lock, no sockets, nothing written in the store; needs --foreground or --log-file"

// openServedStore opens the store a mount serves: made private (0700)
// for a writer; for a follower only checked, never changed; for a host of
// a cluster also given its top directories (layout.OpenStore: mkdirs that
// change nothing once made), so a follower of a store no writer has
// opened yet serves an empty tree.
func openServedStore(store string, lock storeLock) (*storefs.Root, error) {
	switch lock {
	case lockNone:
		if err := storefs.CheckPrivate(store); err != nil {
			return nil, err
		}
		return storefs.Open(store)
	case lockShared:
		return layout.OpenStore(store)
	}
	return storefs.OpenPrivate(store)
}

// serving is what a mount serves: the mounts' engine, and for the
// sockets the single host's engine (a cluster host's sockets start
// without one and get its engine while it writes).
type serving struct {
	mount   ctxfs.Engine
	writer  *session.Engine // a single host's engine; nil for a follower or a cluster host
	sockets bool            // serve the sockets (not a --follow mount)
	start   func(socks *server.Sockets) error
	drain   func() // a cluster's writer hands its store over, before the sockets and mounts go
	close   func()
}

// openServing opens what answers the mount: the store's engine, a
// read-only replica with --follow, or a host of a cluster.
func (c *mountConfig) openServing(st *storefs.Root, log *slog.Logger) (*serving, error) {
	switch {
	case c.follow:
		r, err := replica.Open(c.store, c.root, log)
		if err != nil {
			return nil, err
		}
		log.Info("following", "store", c.store)
		return &serving{mount: r, close: func() { r.Close() }}, nil
	case c.cluster.on():
		return joinCluster(c.cluster, c.store, c.root, log)
	}
	e, err := openWriter(st, c.store, c.root, log)
	if err != nil {
		return nil, err
	}
	return &serving{mount: e, writer: e, sockets: true,
		start: func(*server.Sockets) error { return nil }, drain: func() {}, close: func() { e.Close() }}, nil
}

// storeLock is how a mount holds the store lock (.ctxfs.lock).
type storeLock int

const (
	lockAlone  storeLock = iota // a single host: the store is its alone (lockStore)
	lockShared                  // a host of a cluster: shared with the others, a single host kept out
	lockNone                    // a follower: its writer holds the lock
)

func (c *mountConfig) storeLock() storeLock {
	switch {
	case c.follow:
		return lockNone
	case c.cluster.on():
		return lockShared
	}
	return lockAlone
}

// take takes the store lock as l says; nil for lockNone.
func (l storeLock) take(st *storefs.Root, root string) (*os.File, error) {
	switch l {
	case lockShared:
		return lockStoreShared(st)
	case lockNone:
		return nil, nil
	}
	return lockStore(st, root)
}
