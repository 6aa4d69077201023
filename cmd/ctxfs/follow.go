package main

import (
	"log/slog"

	"github.com/ctxfs/ctxfs/cluster/replica"
	ctxfs "github.com/ctxfs/ctxfs/fs"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session"
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
// for a writer; for a follower only checked, never changed.
func openServedStore(store string, follow bool) (*storefs.Root, error) {
	if !follow {
		return storefs.OpenPrivate(store)
	}
	if err := storefs.CheckPrivate(store); err != nil {
		return nil, err
	}
	return storefs.Open(store)
}

// openEngine opens what answers the mount: the store's engine (writer is
// it; close closes it), or with follow a read-only replica (writer nil).
func openEngine(c *mountConfig, st *storefs.Root, log *slog.Logger) (served ctxfs.Engine, writer *session.Engine, close func() error, err error) {
	if c.follow {
		r, err := replica.Open(c.store, c.root, log)
		if err != nil {
			return nil, nil, nil, err
		}
		log.Info("following", "store", c.store)
		return r, nil, r.Close, nil
	}
	e, err := openWriter(st, c.store, c.root, log)
	if err != nil {
		return nil, nil, nil, err
	}
	return e, e, e.Close, nil
}
