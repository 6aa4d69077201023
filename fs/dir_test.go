package fs

import (
	"context"
	"fmt"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestDirListingsCounted: the listing an open directory holds from its
// first read to its last close counts with its opener's unfinished bytes
// (16 MiB): of a directory of 50,000 names of 64 bytes (5 MiB listed), a
// uid's fourth handle is refused EAGAIN at its read and holds nothing,
// root's is never counted, and a close gives its listing's bytes back, so
// the refused handle lists at its next read. Before, only the handles
// were counted (1,024 per uid), whatever each listing held.
func TestDirListingsCounted(t *testing.T) {
	v := newHandleEnv(t)
	partial := v.e.Limits().Partial
	ents := make([]fuse.DirEntry, 50_000)
	for i := range ents {
		ents[i] = fuse.DirEntry{Name: fmt.Sprintf("%064d", i), Mode: syscall.S_IFREG, Ino: uint64(i + 2)}
	}
	size := listingBytes(ents)
	list := func(context.Context) ([]fuse.DirEntry, syscall.Errno) { return ents, 0 }
	open := func(uid uint32) *dirHandle {
		t.Helper()
		fh, _, bad := v.m.openDir(as(uid), list, 0)
		testkit.WantErrno(t, "opendir", bad, 0)
		return fh.(*dirHandle)
	}
	read := func(h *dirHandle, uid uint32) syscall.Errno {
		_, bad := h.Readdirent(as(uid))
		return bad
	}
	var held []*dirHandle
	for i := range 3 {
		h := open(user)
		testkit.WantErrno(t, fmt.Sprintf("read of listing %d", i+1), read(h, user), 0)
		held = append(held, h)
	}
	if got := partial.Held(user); got != 3*size {
		t.Errorf("three listings held count %d bytes, want %d", got, 3*size)
	}
	refused := open(user)
	testkit.WantErrno(t, "read of a fourth listing", read(refused, user), syscall.EAGAIN)
	if refused.ds != nil || partial.Held(user) != 3*size {
		t.Errorf("the refused read kept a listing (%v) or counted bytes (%d, want %d)", refused.ds != nil, partial.Held(user), 3*size)
	}
	root := open(0)
	testkit.WantErrno(t, "root's read", read(root, 0), 0)
	root.Releasedir(as(0), 0)

	held[0].Releasedir(as(user), 0)
	if got := partial.Held(user); got != 2*size {
		t.Errorf("a closed listing gave back %d bytes of %d", 3*size-got, size)
	}
	testkit.WantErrno(t, "the refused handle's next read", read(refused, user), 0)
	for _, h := range append(held[1:], refused) {
		h.Releasedir(as(user), 0)
	}
	if got := partial.Held(user); got != 0 {
		t.Errorf("every directory closed, the uid still holds %d bytes", got)
	}
}
