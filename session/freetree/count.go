package freetree

import (
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/layout"
)

// Count walks the free trees that may hold uid's inodes and adds up what
// those inodes cost, stopping once they are more than stopAt: the count
// the quota asks for (quota.FreeQuota.CountWith). A hard-linked inode is
// counted once.
func (t Tree) Count(uid uint32, stopAt int64) quota.FreeUse {
	w := walk{t: t, r: t.root, uid: uid, stopAt: stopAt, seen: map[uint64]bool{}}
	w.containers(layout.PrivateHome(uid))
	if spaces, err := t.root.ReadDir("shared"); err == nil {
		for _, sp := range spaces {
			if sp.IsDir() && !strings.HasPrefix(sp.Name, ".") {
				w.containers(layout.SharedHome(sp.Name))
			}
		}
	}
	return w.use
}

// Forget has the use of a private home's uid counted again at its next
// charge: a session that left the home's free trees (archived, deleted)
// took its context/ with it, which no call of the Tree gave back. A
// shared space's members keep their count (until the next start).
func (t Tree) Forget(home string) {
	uid, ok := layout.HomeUid(home)
	if !ok {
		return
	}
	t.quota.Recount(uid)
}

// walk is one count of a uid's free trees.
type walk struct {
	t      Tree
	r      *storefs.Root
	uid    uint32
	stopAt int64
	seen   map[uint64]bool // inodes with more than one link, counted
	use    quota.FreeUse
}

// containers descends from rel through the ABI's directories (agents,
// models, sessions; never the index or the archive) to the free roots
// below it, and counts each.
func (w *walk) containers(rel string) {
	w.each(rel, func(child string, ent storefs.Entry) {
		switch layout.Classify(child).Kind {
		case layout.PlaceFreeRoot:
			w.tree(child)
		case layout.PlaceAgents, layout.PlaceAgent, layout.PlaceModels, layout.PlaceProvider, layout.PlaceModel, layout.PlaceSessions, layout.PlaceSession:
			if ent.IsDir() {
				w.containers(child)
			}
		}
	})
}

// each calls visit with the path and entry of each name in the directory
// rel, until the count is past its bound.
func (w *walk) each(rel string, visit func(child string, ent storefs.Entry)) {
	ents, err := w.r.ReadDir(rel)
	if err != nil {
		return
	}
	for _, ent := range ents {
		if w.use.Partial {
			return
		}
		visit(rel+"/"+ent.Name, ent)
	}
}

// tree counts rel and everything below it that belongs to the uid, by
// descriptors (storefs.WalkTree): a walk by paths left out what lies
// deeper than a path can name, which a user makes by moving a directory
// below a deep one, and got that uid's bytes back at each count.
func (w *walk) tree(rel string) {
	w.r.WalkTree(rel, func(st *unix.Stat_t) bool {
		w.add(st)
		return !w.use.Partial
	})
}

// add counts one inode if it is the uid's (once, for hard links).
func (w *walk) add(st *unix.Stat_t) {
	if st.Uid != w.uid {
		return
	}
	if st.Nlink > 1 && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if w.seen[st.Ino] {
			return
		}
		w.seen[st.Ino] = true
	}
	w.use.Bytes += w.t.charge(st)
	w.use.Inodes++
	if w.use.Inodes > w.stopAt {
		w.use.Partial = true
	}
}
