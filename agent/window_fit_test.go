package agent

import (
	"fmt"
	"testing"

	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/agent/modelapi"
	"github.com/ctxfs/ctxfs/agent/window"
)

// TestRequestTokensAsCounted: the request's tokens as the window keeps
// them counted are window.RequestTokens of the request as sent, for a
// prompt read afresh and one grown from the last prompt's cut, after a
// run appends turns (in the prompt's array and in a new one), after a
// compaction's new array of the later turns with a summary, and after
// another array of the same length takes the request's place.
func TestRequestTokensAsCounted(t *testing.T) {
	promptLogs = newLogMemo(logMemoBytes, logMemoEntries)
	defn := &def.Definition{Kind: "agent", Name: "w", API: &def.API{Config: modelapi.Config{API: modelapi.OpenAIChat, ModelID: "gpt-4o"}}}
	var log []byte
	for i := range 60 {
		log = append(log, memoLine("w", i)+"\n"...)
	}
	check := func(what string, l *toolLoop) {
		t.Helper()
		if got, want := l.requestTokens(), window.RequestTokens(l.sent()); got != want {
			t.Fatalf("%s: counted %d tokens, the request sent has %d", what, got, want)
		}
	}
	for round := range 3 { // afresh, then grown from the cut twice
		log = append(log, memoLine("w", 60+round)+"\n"...)
		p := NewPrompt(owner0, "sys", log, 0, nil, 0)
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
