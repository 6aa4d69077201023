package session

import (
	"errors"
	"io/fs"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
)

// FreeQuota bounds what each uid keeps in the free trees (agents' root/,
// sessions' context/): bytes and inodes, charged to the owner of each
// inode as the kernel's own quotas are. A create or a write through the
// mount that would pass the owner's bound is refused with EDQUOT before
// anything of it is made. Root is not counted.
//
// What an inode costs (FreeCharge) is the space the store's filesystem
// gives it (st_blocks: data, ext4's delayed allocations, the extent and
// directory blocks), as a disk quota counts it: a sparse file costs what it
// holds, a small file a whole block. An operation is charged an estimate
// first (a write: its length in whole blocks), refused with EDQUOT when
// that does not fit, and then what it really cost, read from the file
// after it; blocks the filesystem adds later (an extent block at
// writeback) are seen at the next count.
//
// A uid's use is counted the first time it is asked for, by a walk of
// every free tree that may hold the uid's inodes (its home's, and the
// shared spaces' contexts), and from then on kept up to date by the
// operations the mount performs. What the mount does not see, a jailed
// program's writes to the store's root/ through its bind, is counted at the
// next start; the store's filesystem bounds it meanwhile (those writes run
// with the user's uid, outside root's reserved blocks). The walk stops
// once the uid is past its inode bound (it is then over, and every create
// is refused until it removes something, which makes the next check count
// again), so it costs at most the bound.
type FreeQuota struct {
	bytes, inodes int64 // per uid
	count         func(uid uint32, stopAt int64) freeUse

	mu   sync.Mutex
	uses map[uint32]*uidUse
}

// freeUse is what one uid keeps.
type freeUse struct {
	bytes, inodes int64
	partial       bool // the walk stopped at the bound: at least this much
}

// uidUse is one uid's use, counted once (known).
type uidUse struct {
	mu    sync.Mutex
	known bool
	freeUse
}

// FreeBlock is the block the estimates are made in.
const FreeBlock = 4096

// FreeCharge is what an inode described by st costs in the free trees.
func FreeCharge(st *unix.Stat_t) int64 { return st.Blocks * 512 }

// BlocksFor is the most a write of n bytes at off can add: whole blocks,
// one more when it does not start on a block's edge.
func BlocksFor(off, n int64) int64 {
	n += off % FreeBlock
	return (n + FreeBlock - 1) / FreeBlock * FreeBlock
}

func newFreeQuota(bytes, inodes int64, count func(uid uint32, stopAt int64) freeUse) *FreeQuota {
	return &FreeQuota{bytes: bytes, inodes: inodes, count: count, uses: map[uint32]*uidUse{}}
}

// of is uid's use, counted when it was not yet; its lock is held on return.
func (q *FreeQuota) of(uid uint32) *uidUse {
	q.mu.Lock()
	u := q.uses[uid]
	if u == nil {
		u = &uidUse{}
		q.uses[uid] = u
	}
	q.mu.Unlock()
	u.mu.Lock()
	if !u.known {
		u.freeUse = q.count(uid, q.inodes)
		u.known = true
	}
	return u
}

// Take charges uid bytes and inodes more, or refuses with EDQUOT when that
// would pass a bound (nothing is charged then). Root is never refused.
func (q *FreeQuota) Take(uid uint32, bytes, inodes int64) error {
	if uid == 0 || bytes <= 0 && inodes <= 0 {
		q.Give(uid, -bytes, -inodes)
		return nil
	}
	u := q.of(uid)
	defer u.mu.Unlock()
	switch {
	case inodes > 0 && u.inodes+inodes > q.inodes:
		return abi.Errorf(syscall.EDQUOT, "", "uid %d keeps %d files in the free trees, the most one uid may", uid, u.inodes)
	case bytes > 0 && u.bytes+bytes > q.bytes:
		return abi.Errorf(syscall.EDQUOT, "", "uid %d keeps %d bytes in the free trees; %d more would pass the %d one uid may", uid, u.bytes, bytes, q.bytes)
	}
	u.bytes += bytes
	u.inodes += inodes
	return nil
}

// Give takes bytes and inodes off uid's use (what was removed or shrunk);
// negative amounts are added without a check (what was found to have
// grown after the fact). A use the walk left partial is counted again at
// the next Take.
func (q *FreeQuota) Give(uid uint32, bytes, inodes int64) {
	if uid == 0 || bytes == 0 && inodes == 0 {
		return
	}
	q.mu.Lock()
	u := q.uses[uid]
	q.mu.Unlock()
	if u == nil {
		return // not counted yet: the walk will see the store as it is
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.partial {
		u.known = false
		return
	}
	u.bytes = max(u.bytes-bytes, 0)
	u.inodes = max(u.inodes-inodes, 0)
}

// forgetHome has the use of a private home's uid counted again at its
// next Take: a session that left the home's free trees (archived, deleted)
// took its context/ with it, which no operation of the mount gave back.
// A shared space's members keep their count (until the next start).
func (q *FreeQuota) forgetHome(home string) {
	uid, err := strconv.ParseUint(strings.TrimPrefix(home, "home/"), 10, 32)
	if err != nil || !strings.HasPrefix(home, "home/") {
		return
	}
	q.mu.Lock()
	u := q.uses[uint32(uid)]
	q.mu.Unlock()
	if u != nil {
		u.mu.Lock()
		u.known = false
		u.mu.Unlock()
	}
}

// Use is what uid keeps in the free trees now, as counted.
func (q *FreeQuota) Use(uid uint32) (bytes, inodes int64) {
	u := q.of(uid)
	defer u.mu.Unlock()
	return u.bytes, u.inodes
}

// countFree walks the free trees that may hold uid's inodes and adds up
// what those inodes cost, stopping once they are more than stopAt. A
// hard-linked inode is counted once.
func (e *Engine) countFree(uid uint32, stopAt int64) freeUse {
	w := freeWalk{r: e.root, uid: uid, stopAt: stopAt, seen: map[uint64]bool{}}
	w.containers(PrivateHome(uid))
	if spaces, err := e.root.ReadDir("shared"); err == nil {
		for _, sp := range spaces {
			if sp.IsDir() && !strings.HasPrefix(sp.Name, ".") {
				w.containers(SharedHome(sp.Name))
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
	use    freeUse
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
		if w.use.partial {
			return
		}
		child := rel + "/" + ent.Name
		switch Classify(child).Kind {
		case PlaceFreeRoot:
			w.tree(child)
		case PlaceAgents, PlaceAgent, PlaceModels, PlaceProvider, PlaceModel, PlaceSessions, PlaceSession:
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
		if w.use.partial {
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
	w.use.bytes += FreeCharge(st)
	w.use.inodes++
	if w.use.inodes > w.stopAt {
		w.use.partial = true
	}
}
