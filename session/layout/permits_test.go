package layout

import (
	"os"
	"testing"
)

// TestPermits: the kernel's classes, the owner's before the group's before
// the others' (an owner without the bit is refused even where others have
// it), every bit of want asked, root always let in.
func TestPermits(t *testing.T) {
	member := Caller{Uid: 1001, Gid: 1001, Groups: []uint32{50}}
	for _, c := range []struct {
		c          Caller
		uid, gid   uint32
		mode, want os.FileMode
		ok         bool
	}{
		{member, 1001, 9, 0o700, 7, true},
		{member, 1001, 9, 0o077, 2, false}, // the owner's class decides
		{member, 9, 50, 0o070, 7, true},    // a supplementary group
		{member, 9, 50, 0o050, 7, false},   // every bit asked
		{member, 9, 1001, 0o707, 1, false}, // the group's class decides
		{member, 9, 9, 0o002, 2, true},
		{member, 9, 9, 0o001, 2, false},
		{Caller{}, 9, 9, 0, 7, true}, // root
	} {
		if got := c.c.Permits(c.uid, c.gid, c.mode, c.want); got != c.ok {
			t.Errorf("%+v on %d:%d %o asking %o: %v, want %v", c.c, c.uid, c.gid, c.mode, c.want, got, c.ok)
		}
	}
}
