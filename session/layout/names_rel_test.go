package layout

import (
	"path"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
)

// TestRefRelJoinsOnce: a session's path joined in one step is the
// container's path joined with the name, whatever the parts hold.
func TestRefRelJoinsOnce(t *testing.T) {
	for _, c := range []Container{
		{Home: "home/0", Kind: abi.KindAgent, Owner: "coder"},
		{Home: "shared/team/", Kind: abi.KindModel, Owner: "openai/gpt-4"},
		{Home: "", Kind: abi.KindAgent, Owner: "a"},
		{Home: "home/../x", Kind: abi.KindAgent, Owner: "./b"},
		{Home: "/home/1", Kind: abi.KindAgent, Owner: "c/"},
		{Home: "home//1", Kind: abi.KindModel, Owner: ""},
		{Home: ".", Kind: abi.KindAgent, Owner: ".."},
	} {
		for _, name := range []string{"default", "", ".", "..", "a/../b", "/x/", "x//y"} {
			r := Ref{Container: c, Name: name}
			kind, owner := "agent", c.Owner
			if c.Kind == abi.KindModel {
				kind, owner = "model", c.Owner+".d"
			}
			if got, want := c.Rel(), path.Join(c.Home, kind, owner, "session"); got != want {
				t.Errorf("%+v: Rel %q, want %q", c, got, want)
			}
			if got, want := r.Rel(), path.Join(c.Rel(), name); got != want {
				t.Errorf("%+v: Rel %q, want %q", r, got, want)
			}
		}
	}
}
