package session

import (
	"testing"

	"github.com/ctxfs/ctxfs/agent/modelapi"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/session/layout"
)

// TestPromptOwner: a run's request is its uid's and its session's
// (modelapi.Owner), so that what the provider keeps of one session's
// conversation serves that session's next requests only: another
// session, a temp session of the same name, or the same session run as
// another uid, is another owner.
func TestPromptOwner(t *testing.T) {
	env := newEnv(t)
	env.send(root0, coder(), `{"op":"send","id":"c1","input":"hello"}`)
	env.send(root0, coder(), `{"op":"send","id":"c2","session":"other","input":"hello"}`)
	owner := func(r layout.Ref, c layout.Caller) modelapi.Owner {
		s, release, err := env.e.lookup(r)
		testkit.Must(t, err)
		defer release()
		return s.promptAs("", c, 0).Owner
	}
	other := coderDefault()
	other.Name = "other"
	mine := owner(coderDefault(), root0)
	if want := (modelapi.Owner{Uid: root0.Uid, Conversation: "home/0/agent/coder/session/default"}); mine != want {
		t.Fatalf("the prompt's owner is %+v, want %+v", mine, want)
	}
	env.send(root0, coder(), `{"op":"send","id":"c3","session":"default","scope":"temp","input":"hello"}`)
	temp := coderDefault()
	temp.Temp = true
	for _, o := range []modelapi.Owner{owner(other, root0), owner(coderDefault(), layout.Caller{Uid: 1000, Gid: 1000}), owner(temp, root0)} {
		if o == mine || o.Conversation == "" {
			t.Errorf("another session or uid has the owner %+v (the first: %+v)", o, mine)
		}
	}
}
