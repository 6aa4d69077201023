package session

import (
	"reflect"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/layout"
)

// TestSpaceGroup: a run in a shared space gets the space's group when its
// caller is in it by a supplementary group, and never a group its caller
// is not in nor any other of its caller's groups; a private run none.
func TestSpaceGroup(t *testing.T) {
	shared := &location{scope: abi.ScopeShared, own: storefs.Owner{Uid: 1002, Gid: 1234}}
	for _, tc := range []struct {
		c    layout.Caller
		loc  *location
		want []uint32
	}{
		{layout.Caller{Uid: 1002, Gid: 1002, Groups: []uint32{1235, 1234}}, shared, []uint32{1234}},
		{layout.Caller{Uid: 1002, Gid: 1234, Groups: []uint32{1235}}, shared, nil}, // its gid already
		{layout.Caller{Uid: 1002, Gid: 1002, Groups: []uint32{1235}}, shared, nil}, // let in by the space's mode alone
		{layout.Caller{Uid: 1002, Gid: 1002, Groups: []uint32{1234}}, &location{scope: abi.ScopePrivate, own: storefs.Owner{Uid: 1002, Gid: 1234}}, nil},
		{layout.Caller{Uid: 1002, Gid: 1002, Groups: []uint32{1234}}, &location{scope: abi.ScopeTemp, own: storefs.Owner{Uid: 1002, Gid: 1234}}, nil},
	} {
		if got := spaceGroup(tc.c, tc.loc); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("spaceGroup(%+v, %s) = %v, want %v", tc.c, tc.loc.scope, got, tc.want)
		}
	}
}
