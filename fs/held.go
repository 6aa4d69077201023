package fs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"

	"github.com/ctxfs/ctxfs/internal/quota"
)

// held is what every handle the mount gives out carries: its place in its
// opener's quota of open files (quota.Limits.Handles), given back when
// the last close releases the handle. A user who keeps files open holds
// descriptors and memory of the server; the quota bounds both.
type held struct{ give func() }

// hold is set once, by opened.
func (h *held) hold(give func()) { h.give = give }

// giveBack returns the handle's place in the quota (Release calls it).
func (h *held) giveBack() {
	if h.give != nil {
		h.give()
		h.give = nil
	}
}

// holder is a handle that carries a held.
type holder interface {
	hold(give func())
}

// opened counts an open file against the caller's quota (EMFILE when the
// caller holds its share already) around open, which makes the handle.
func (m *mountState) opened(ctx context.Context, open func() (fs.FileHandle, uint32, syscall.Errno)) (fs.FileHandle, uint32, syscall.Errno) {
	uid := callerUid(ctx)
	quota := m.e.Limits().Handles
	if err := quota.Take(uid); err != nil {
		return nil, 0, errno(err)
	}
	fh, flags, bad := open()
	if bad != 0 {
		quota.Give(uid)
		return nil, 0, bad
	}
	fh.(holder).hold(func() { quota.Give(uid) })
	return fh, flags, 0
}

// buffered counts what a handle holds of a writer's unfinished request,
// line or value against the writer's share of quota.Limits.Partial:
// bytes the server keeps only because a writer has not finished, which a
// user could otherwise pile up through many descriptors (1,019
// half-written ctl requests of 1 MiB held 1 GB, for good); and the copy
// of a read-only session file a reader's handle holds (roNode.open), for
// the same reason. The zero value counts nothing (root, or a handle that
// never buffers).
type buffered struct {
	quota *quota.Quota
	uid   uint32
	n     int // bytes counted now
}

func newBuffered(m *mountState, uid uint32) buffered {
	return buffered{quota: m.e.Limits().Partial, uid: uid}
}

// keep makes n the bytes counted: taking the growth (EAGAIN, nothing
// more counted, when it is over the writer's share) or giving back the
// rest.
func (b *buffered) keep(n int) error {
	if b.quota == nil {
		return nil
	}
	if n > b.n {
		if err := b.quota.TakeN(b.uid, n-b.n); err != nil {
			return err
		}
	} else {
		b.quota.GiveN(b.uid, b.n-n)
	}
	b.n = n
	return nil
}

// heldCopy is the copy of a file a reader's handle serves from its open
// to its last close (one value, one list, whole, whatever changes
// meanwhile), counted with the opener's unfinished bytes: each open holds
// one, and a uid's 1,024 open files would otherwise make the server hold
// gigabytes of them.
type heldCopy struct {
	data     []byte
	buffered buffered
}

// holdCopy counts b as a copy the caller's new handle holds, or refuses
// it (EAGAIN past the caller's share; nothing counted).
func (m *mountState) holdCopy(ctx context.Context, b []byte) (heldCopy, syscall.Errno) {
	c := heldCopy{data: b, buffered: newBuffered(m, callerUid(ctx))}
	if err := c.buffered.keep(len(b)); err != nil {
		return heldCopy{}, errno(err)
	}
	return c, 0
}

// drop lets the copy go at the handle's last close.
func (c *heldCopy) drop() {
	c.data = nil
	c.buffered.keep(0)
}
