package session

import (
	"errors"
	"io/fs"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/quota"
)

// forgetHome has the use of a private home's uid counted again at its
// next Take: a session that left the home's free trees (archived, deleted)
// took its context/ with it, which no operation of the mount gave back.
// A shared space's members keep their count (until the next start).
func forgetHome(q *quota.FreeQuota, home string) {
	uid, err := strconv.ParseUint(strings.TrimPrefix(home, "home/"), 10, 32)
	if err != nil || !strings.HasPrefix(home, "home/") {
		return
	}
	q.Recount(uint32(uid))
}

// countFree walks the free trees that may hold uid's inodes and adds up
// what those inodes cost, stopping once they are more than stopAt. A
// hard-linked inode is counted once.
func (e *Engine) countFree(uid uint32, stopAt int64) quota.FreeUse {
	w := freeWalk{r: e.root, uid: uid, stopAt: stopAt, seen: map[uint64]bool{}}
	w.containers(layout.PrivateHome(uid))
	if spaces, err := e.root.ReadDir("shared"); err == nil {
		for _, sp := range spaces {
			if sp.IsDir() && !strings.HasPrefix(sp.Name, ".") {
				w.containers(layout.SharedHome(sp.Name))
			}
		}
	}
	return w.use
}

// freeWalk is one count of a uid's free trees.
type freeWalk struct {
	r      *storefs.Root
	uid    uint32
	stopAt int64
	seen   map[uint64]bool // inodes with more than one link, counted
	use    quota.FreeUse
}

// containers descends from rel through the ABI's directories (agents,
// models, sessions; never the index or the archive) to the free roots
// below it, and counts each.
func (w *freeWalk) containers(rel string) {
	ents, err := w.r.ReadDir(rel)
	if err != nil {
		return
	}
	for _, ent := range ents {
		if w.use.Partial {
			return
		}
		child := rel + "/" + ent.Name
		switch layout.Classify(child).Kind {
		case layout.PlaceFreeRoot:
			w.tree(child)
		case layout.PlaceAgents, layout.PlaceAgent, layout.PlaceModels, layout.PlaceProvider, layout.PlaceModel, layout.PlaceSessions, layout.PlaceSession:
			if ent.IsDir() {
				w.containers(child)
			}
		}
	}
}

// tree counts rel and everything below it that belongs to the uid.
func (w *freeWalk) tree(rel string) {
	st, err := w.r.Lstat(rel)
	if err != nil {
		return
	}
	w.add(st)
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return
	}
	ents, err := w.r.ReadDir(rel)
	if errors.Is(err, fs.ErrNotExist) || err != nil {
		return
	}
	for _, ent := range ents {
		if w.use.Partial {
			return
		}
		w.tree(rel + "/" + ent.Name)
	}
}

// add counts one inode if it is the uid's (once, for hard links).
func (w *freeWalk) add(st *unix.Stat_t) {
	if st.Uid != w.uid {
		return
	}
	if st.Nlink > 1 && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if w.seen[st.Ino] {
			return
		}
		w.seen[st.Ino] = true
	}
	w.use.Bytes += quota.FreeCharge(st)
	w.use.Inodes++
	if w.use.Inodes > w.stopAt {
		w.use.Partial = true
	}
}
