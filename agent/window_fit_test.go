package agent

import (
	"fmt"
	"testing"

	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/agent/modelapi"
	"github.com/ctxfs/ctxfs/agent/prompt"
	"github.com/ctxfs/ctxfs/agent/window"
)

// TestRequestTokensAsCounted: the request's tokens as the window keeps
// them counted are window.RequestTokens of the request as sent, for a
// prompt read afresh and one grown from the last prompt's cut, after a
// run appends turns (in the prompt's array and in a new one), after a
// compaction's new array of the later turns with a summary, and after
// another array of the same length takes the request's place.
//
// The test reads its prompts with memos of its own: the first round's
// prompt is read afresh.
func TestRequestTokensAsCounted(t *testing.T) {
	defn := &def.Definition{Kind: "agent", Name: "w", API: &def.API{Config: modelapi.Config{API: modelapi.OpenAIChat, ModelID: "gpt-4o"}}}
	var log []byte
	for i := range 60 {
		log = append(log, fitLine(i)+"\n"...)
	}
	check := func(what string, l *toolLoop) {
		t.Helper()
		if got, want := l.requestTokens(), window.RequestTokens(l.sent()); got != want {
			t.Fatalf("%s: counted %d tokens, the request sent has %d", what, got, want)
		}
	}
	memos := prompt.NewMemos()
	for round := range 3 { // afresh, then grown from the cut twice
		log = append(log, fitLine(60+round)+"\n"...)
		p := memos.New(testOwner, "sys", log, 0, nil, 0)
		s := Spec{Def: defn, Prompt: p}
		l := &toolLoop{s: s}
		l.firstRequest()
		check(fmt.Sprint("round ", round, ", the prompt"), l)
		for k := range 5 {
			l.req.Turns = append(l.req.Turns, modelapi.Turn{Role: modelapi.RoleTool, ToolCallID: fmt.Sprint("c", k), Text: "a result é"})
			check(fmt.Sprint("round ", round, ", appended ", k+1), l)
		}
		l.req.Turns = append([]modelapi.Turn(nil), l.req.Turns[10:]...)
		l.win.summary, l.win.cut = "what came before", true
		check(fmt.Sprint("round ", round, ", compacted"), l)
		other := make([]modelapi.Turn, len(l.req.Turns))
		copy(other, l.req.Turns)
		other[0].Text += " and more words than it had"
		l.req.Turns = other
		check(fmt.Sprint("round ", round, ", another array"), l)
	}
}

// testOwner is whose prompts the tests read, unless they say otherwise.
var testOwner = modelapi.Owner{Uid: 1000, Conversation: "home/1000/agent/coder/session/s"}

// fitLine is line i of a session: users, assistants with tool calls,
// tool results, and a line that is no turn.
func fitLine(i int) string {
	switch i % 4 {
	case 0:
		return fmt.Sprintf(`{"role":"user","content":"question %d"}`, i)
	case 1:
		return fmt.Sprintf(`{"role":"assistant","content":[{"type":"text","text":"looking %d"},{"type":"tool_call","id":"c%d","name":"fs.read","arguments":{"path":"a"}}]}`, i, i)
	case 2:
		return fmt.Sprintf(`{"role":"tool","name":"fs.read","content":[{"type":"tool_result","tool_call_id":"c%d","content":"data %d","is_error":false}]}`, i-1, i)
	}
	return fmt.Sprintf(`{"note":"not a message %d"}`, i)
}
