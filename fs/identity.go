package fs

import "sync/atomic"

// identity is what the server must remember of one inode the kernel may
// hold, whichever node object go-fuse keeps for it: its change stamp
// (node.go), whether the kernel may hold attributes given since they
// were last marked stale (tracked, notify.go), and, for a log, what its
// cached pages may hold past the end (pages.go).
//
// Why it is not a field of the node: a LOOKUP or a READDIRPLUS entry
// builds a new node (attach) and fills the reply from it, but when the
// kernel knows the inode already go-fuse keeps the node it registered
// first and drops the new one (its identity table: the first node of a
// StableAttr wins). Held by the node, the "attributes given" mark of
// that reply landed on the dropped node, the notifier (which finds the
// kept one) saw none, and the next append was not announced to the
// kernel: after `ls` of a session (READDIRPLUS) a reader saw the log's
// old size, and so its old end, for the hour of cacheTimeout (issue 20:
// `cat messages.jsonl | wc -l` gave 5 lines while the store held 7).
// Shared by every node object of the same inode number, the mark and the
// stamp are the kernel's inode's, exactly, however the kernel came to
// hold it.
type identity struct {
	ino        uint64 // the number (inoOf), kept: a GETATTR need not hash the path again
	stamp      atomic.Int64
	attrsGiven atomic.Bool
	ends       ends // a log's: pages.go
}

// identities gives the node objects of one inode (its number and
// generation: inodeKey) one identity.
// An entry lives as long as a node object holds it: go-fuse keeps the
// node of every inode the kernel knows, so an identity is never dropped
// while the kernel may hold what it describes, and when it is (the kernel
// forgot the inode, go-fuse dropped the node) a node made later starts
// afresh, as the kernel does. The table is so bounded by the nodes alive.
// Its cost is small beside the LOOKUP that makes a node
// (docs/benchmarks.md#node-identities); warm reads and listings make no
// node at all.
type identities struct{ t weakTable[inodeKey, identity] }

// inodeKey is an inode as the kernel knows it: its number and generation
// (a session's life at its path, life.go: two lives are two inodes).
type inodeKey struct{ ino, gen uint64 }

func newIdentities() *identities { return &identities{} }

// of is the identity of inode number ino of generation gen, made when no
// node holds one.
func (ids *identities) of(ino, gen uint64) *identity {
	return ids.t.get(inodeKey{ino, gen}, func() *identity { return &identity{ino: ino} })
}

// size is the number of entries (tests).
func (ids *identities) size() int { return ids.t.size() }
