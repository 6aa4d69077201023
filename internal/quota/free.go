package quota

import (
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
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
	count         func(uid uint32, stopAt int64) FreeUse

	uses counted[uint32, FreeUse]
}

// FreeUse is what one uid keeps, as a count found it.
type FreeUse struct {
	Bytes, Inodes int64
	Partial       bool // the count stopped past the bound: at least this much
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

// NewFreeQuota bounds each uid to bytes and inodes; count (nil until
// CountWith) counts what a uid keeps when first asked.
func NewFreeQuota(bytes, inodes int64, count func(uid uint32, stopAt int64) FreeUse) *FreeQuota {
	return &FreeQuota{bytes: bytes, inodes: inodes, count: count}
}

// CountWith has count find what a uid keeps, the first time it is asked
// for and after Recount: it walks the store, which this package never
// reads. Called once, before the quota is used.
func (q *FreeQuota) CountWith(count func(uid uint32, stopAt int64) FreeUse) { q.count = count }

// of is uid's use, counted when it was not yet; its lock is held on return.
func (q *FreeQuota) of(uid uint32) *use[FreeUse] {
	return q.uses.of(uid, func() FreeUse { return q.count(uid, q.inodes) })
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
	case inodes > 0 && u.v.Inodes+inodes > q.inodes:
		return abi.Errorf(syscall.EDQUOT, "", "uid %d keeps %d files in the free trees, the most one uid may", uid, u.v.Inodes)
	case bytes > 0 && u.v.Bytes+bytes > q.bytes:
		return abi.Errorf(syscall.EDQUOT, "", "uid %d keeps %d bytes in the free trees; %d more would pass the %d one uid may", uid, u.v.Bytes, bytes, q.bytes)
	}
	u.v.Bytes += bytes
	u.v.Inodes += inodes
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
	u := q.uses.ever(uid)
	if u == nil {
		return // not counted yet: the walk will see the store as it is
	}
	defer u.mu.Unlock()
	if u.v.Partial {
		u.known = false
		return
	}
	u.v.Bytes = max(u.v.Bytes-bytes, 0)
	u.v.Inodes = max(u.v.Inodes-inodes, 0)
}

// Recount has uid's use counted again at its next Take: something the
// mount did not see changed its free trees (a session moved away, a
// jailed program wrote root/ through the jail's bind of the store).
func (q *FreeQuota) Recount(uid uint32) {
	if u := q.uses.ever(uid); u != nil {
		u.known = false
		u.mu.Unlock()
	}
}

// Use is what uid keeps in the free trees now, as counted.
func (q *FreeQuota) Use(uid uint32) (bytes, inodes int64) {
	u := q.of(uid)
	defer u.mu.Unlock()
	return u.v.Bytes, u.v.Inodes
}
