package session

import (
	"context"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/layout"
)

// A request written to a session's ctl file that names another session,
// scope or space is EINVAL, and nothing is written; one that names its
// own, or none, is taken.
func TestControlNamesItsSession(t *testing.T) {
	env := newEnv(t)
	for _, space := range []string{"team", "other"} {
		testkit.Must(t, env.e.AddSpace(space, 1234, 0o770))
	}
	member := layout.Caller{Uid: 1001, Gid: 1001, Groups: []uint32{1234}}
	env.send(member, coder(), `{"op":"send","id":"c1","session":"c","input":"x","scope":"shared","space":"team"}`)
	ref := layout.Ref{Container: layout.Container{Home: "shared/team", Kind: abi.KindAgent, Owner: "coder"}, Name: "c"}
	control := func(line string) error {
		req, err := proto.ParseRequest([]byte(line))
		testkit.Must(t, err)
		r, err := env.e.BeginControl(context.Background(), member, ref, req)
		if err == nil {
			_, err = drain(r)
			r.Close()
		}
		return err
	}
	before := env.settledTree()
	for what, line := range map[string]string{
		"another session": `{"op":"status","session":"other"}`,
		"another scope":   `{"op":"status","scope":"private"}`,
		"another space":   `{"op":"status","scope":"shared","space":"other"}`,
	} {
		testkit.WantErrno(t, what, control(line), syscall.EINVAL)
	}
	testkit.Same(t, "refused requests", before, env.settledTree())
	for _, line := range []string{`{"op":"status"}`, `{"op":"status","session":"c","scope":"shared","space":"team"}`} {
		testkit.Must(t, control(line))
	}
}
