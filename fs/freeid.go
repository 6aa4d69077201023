package fs

import (
	"slices"
	"strings"
	"sync"

	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"
)

// freeIDs gives each store inode of the free trees the generation its
// node is known by (fs.StableAttr.Gen). go-fuse answers a LOOKUP with
// the node it already holds for the same number and generation, and the
// kernel then takes that node's inode, whoever holds it. A store inode
// number is reused once its file is gone, and a node can outlive its
// file: a descriptor (even O_PATH, which opens nothing through FUSE) or
// a working directory keeps it after its last name is removed, or after
// a jailed program removed the file through the jail's bind. With one
// generation for all, another user's file given the freed number, and
// looked up, became that old node: its path was the new file's, and its
// holder reopened the file through its descriptor, past the 0700 of the
// home it lies in. So the node held for a number is taken again only
// while it still leads to that inode (the path looked up, or a hard
// link's); anything else gets a new generation, so a node of its own.
type freeIDs struct {
	mu    sync.Mutex
	byIno map[uint64]*freeNode // the node last made for each store inode
	next  uint64               // the last generation given
}

// freeID is the node of rel, a name of the free trees whose store inode
// is st, and its identity, for a lookup or a create below root (the
// mount's root node).
func (m *mountState) freeID(root *fs.Inode, rel string, st *unix.Stat_t) (*freeNode, fs.StableAttr) {
	ids, ino, mode := &m.free, freeIno(st.Ino), st.Mode&unix.S_IFMT
	ids.mu.Lock()
	old := ids.byIno[ino]
	ids.mu.Unlock()
	if old != nil && old.mode == mode && m.leadsTo(root, old, rel, st) {
		return &freeNode{m: m, ino: ino, mode: mode, gen: old.gen}, old.attr()
	}
	ids.mu.Lock()
	defer ids.mu.Unlock()
	if ids.byIno == nil {
		ids.byIno = map[uint64]*freeNode{}
	}
	ids.next++
	node := &freeNode{m: m, ino: ino, mode: mode, gen: ids.next}
	ids.byIno[ino] = node
	return node, node.attr()
}

// attr is the node's identity for go-fuse.
func (n *freeNode) attr() fs.StableAttr { return fs.StableAttr{Mode: n.mode, Ino: n.ino, Gen: n.gen} }

// leadsTo reports whether old, a node made for st's inode number, still
// stands for that very inode: it is the node of rel, or its own path
// leads to the same inode (a hard link). A node with no path (its last
// name removed) or whose path leads elsewhere now stands for a file that
// is gone.
func (m *mountState) leadsTo(root *fs.Inode, old *freeNode, rel string, st *unix.Stat_t) bool {
	oldRel, ok := m.pathOf(root, old)
	if !ok {
		return false
	}
	if oldRel == rel {
		return true
	}
	ost, err := m.e.FreeTree().Lstat(oldRel)
	return err == nil && ost.Ino == st.Ino && ost.Dev == st.Dev
}

// pathOf is the store path of node, when it still has one: its names up
// to root. Unlike Inode.Path it asks nothing of go-fuse but each node's
// parent, so a node made by freeID that go-fuse has not taken in yet (a
// lookup of the same number at the same time) is one with no path.
func (m *mountState) pathOf(root *fs.Inode, node *freeNode) (string, bool) {
	var names []string
	for p := node.EmbeddedInode(); p != root; {
		name, parent := p.Parent()
		if parent == nil {
			return "", false
		}
		names = append(names, name)
		p = parent
	}
	slices.Reverse(names)
	return m.top + "/" + strings.Join(names, "/"), true
}

// OnForget drops the node from freeIDs once the kernel and the tree
// hold it no more.
func (n *freeNode) OnForget() {
	ids := &n.m.free
	ids.mu.Lock()
	if ids.byIno[n.ino] == n {
		delete(ids.byIno, n.ino)
	}
	ids.mu.Unlock()
}
