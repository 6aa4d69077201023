package replica

import (
	"bytes"
	"path"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/index"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/sealedlog"
)

// A follower's index of a container is the store's, read with
// index.ViewPending (which changes nothing) and read again when it is over
// indexFresh old and asked for. The store's index files lag the writer's
// memory: the list by up to a second (the writer writes its snapshot at
// most once a second; sessions touched since go in front by their
// updated_at, as a load after a crash orders them), current and the
// entries until the writer's journal checkpoints them (sealedlog: 30 s by
// default), so those are read from the journal's value records first
// (sealedlog.JournalReader, which reads each batch once) and laid over
// the files. What a reload finds changed is announced, as the writer's
// index announces its changes (index.OnChange).

const indexFresh = time.Second

// indexes holds the views of the containers asked about.
type indexes struct {
	root     *storefs.Root
	announce func(rel string)
	journal  *sealedlog.JournalReader // the writer's journal, each batch read once

	load  sync.Mutex // one load at a time: a container may hold 100,000 sessions
	mu    sync.Mutex
	views map[string]*view // by container rel
}

type view struct {
	x  *index.Index
	at time.Time
}

func newIndexes(root *storefs.Root, journal *sealedlog.JournalReader, announce func(rel string)) *indexes {
	return &indexes{root: root, announce: announce, views: map[string]*view{}, journal: journal}
}

// Index is the container's index as the store holds it (read-only: every
// change is EROFS).
func (r *Replica) Index(ct layout.Container) (*index.Index, error) { return r.indexes.get(ct) }

func (ix *indexes) get(ct layout.Container) (*index.Index, error) {
	if !ct.Valid() || ct.Home == "" {
		return nil, abi.Errorf(syscall.EINVAL, "index", "invalid container %+v", ct)
	}
	rel := ct.Rel()
	if v := ix.fresh(rel); v != nil {
		return v.x, nil
	}
	ix.load.Lock()
	defer ix.load.Unlock()
	if v := ix.fresh(rel); v != nil {
		return v.x, nil // loaded while this one waited
	}
	// The journal before the files: a checkpoint between the two then
	// shows its values in the files, never neither.
	pending, err := ix.journal.Values(rel + "/" + abi.ReservedSessionName + "/")
	if err != nil {
		pending = nil // the files alone, as they are
	}
	x, err := index.ViewPending(ix.root, rel, toPending(pending))
	if err != nil {
		return nil, err
	}
	ix.mu.Lock()
	old := ix.views[rel]
	ix.views[rel] = &view{x: x, at: time.Now()}
	ix.mu.Unlock()
	if old != nil {
		for _, changed := range indexChanges(path.Join(rel, abi.ReservedSessionName), old.x, x) {
			ix.announce(changed)
		}
	}
	return x, nil
}

// forget drops the view of ct, so that the next ask reads the store
// again: after a change this host relayed, which the writer made durable
// before it answered.
func (ix *indexes) forget(ct layout.Container) {
	ix.mu.Lock()
	if v := ix.views[ct.Rel()]; v != nil {
		v.at = time.Time{}
	}
	ix.mu.Unlock()
}

// fresh is the view of rel when it is younger than indexFresh.
func (ix *indexes) fresh(rel string) *view {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if v := ix.views[rel]; v != nil && time.Since(v.at) < indexFresh {
		return v
	}
	return nil
}

// indexChanges are the files of the index directory dir whose content
// differs between two views: list, current, each entry (and the entry
// directories whose names came or went).
func indexChanges(dir string, old, now *index.Index) []string {
	var out []string
	if !bytes.Equal(old.ListBytes(), now.ListBytes()) {
		out = append(out, path.Join(dir, "list"))
	}
	if old.Current() != now.Current() {
		out = append(out, path.Join(dir, "current"))
	}
	for _, kind := range abi.IndexKinds {
		was, is := old.Keys(kind), now.Keys(kind)
		if !slices.Equal(was, is) {
			out = append(out, path.Join(dir, kind))
		}
		for _, key := range slices.Compact(slices.Sorted(slices.Values(slices.Concat(was, is)))) {
			a, _ := old.Lookup(kind, key)
			b, _ := now.Lookup(kind, key)
			if a != b {
				out = append(out, path.Join(dir, kind, key))
			}
		}
	}
	return out
}

// toPending is the journal's pending values as the index takes them.
func toPending(values map[string]sealedlog.PendingValue) index.Pending {
	if len(values) == 0 {
		return nil
	}
	p := make(index.Pending, len(values))
	for rel, v := range values {
		p[rel] = v.Data // nil when removed
	}
	return p
}
