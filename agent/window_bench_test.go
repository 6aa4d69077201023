package agent

import (
	"context"
	"runtime"
	"testing"

	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/agent/modelapi"
	"github.com/ctxfs/ctxfs/agent/prompt"
	"github.com/ctxfs/ctxfs/agent/prompt/prompttest"
	"github.com/ctxfs/ctxfs/agent/window"
	"github.com/ctxfs/ctxfs/proto"
)

// assemble is the prompt assembly of a model run: the prompt from the
// log and the summary (Memos.New, with memos), then fitted to a 128k window
// (truncate: the oldest turns cut, the summary kept with a new cursor).
func assemble(tb testing.TB, memos *prompt.Memos, log []byte, start int64, summary []byte) *toolLoop {
	defn := &def.Definition{Kind: "agent", Name: "b", API: &def.API{Config: modelapi.Config{API: modelapi.OpenAIChat, ModelID: "gpt-4o"}}, WindowDef: def.WindowDef{Strategy: def.CompactTruncate}}
	p := memos.New(testOwner, "Answer briefly.", log, start, summary, defn.Limits().Prompt())
	p.Keep = func(b []byte) error { return nil }
	s := Spec{Def: defn, Prompt: p}
	l := newToolLoop(s, func(*proto.Object) {}, 0, nil)
	l.req, l.win = p.Request, newRunWindow(s)
	if !l.fit(context.Background(), defn.API.Config) {
		tb.Fatal("the prompt does not fit")
	}
	if n := window.RequestTokens(l.sent()); n > l.win.lim.Prompt() || !l.win.cut {
		tb.Fatalf("prompt of %d tokens, summary sent %v", n, l.win.cut)
	}
	return l
}

// BenchmarkPromptAssembly: a 100,000-message session with a summary, as
// the engine hands it to a run (the last 4 MiB of messages.jsonl, about
// 28,000 lines). "steady": the summary covers up to message 97,000, where
// the last compaction left it (the 3,000 newest, about 70k tokens, fit the
// window); "stale": it covers up to 90,000, so the 10,000 after it (about
// 230k tokens) are parsed and cut again. The bound: under 50 ms and 50 MB
// an assembly. "cold" reads each with new memos (no parsed turns, no read
// logs), as a session's first run after the server started finds them;
// "warm" keeps them, as the session's next run does.
func BenchmarkPromptAssembly(b *testing.B) {
	for _, c := range []struct {
		name string
		at   int
	}{{"steady", 97000}, {"stale", 90000}} {
		log, summary := prompttest.Session(prompttest.Messages, c.at)
		tail, start := prompttest.Tail(log)
		for _, cold := range []bool{true, false} {
			b.Run(c.name+map[bool]string{true: "/cold", false: "/warm"}[cold], func(b *testing.B) {
				b.ReportAllocs()
				memos := prompt.NewMemos()
				for b.Loop() {
					if cold {
						memos = prompt.NewMemos()
					}
					assemble(b, memos, tail, start, summary)
				}
			})
		}
	}
}

// TestPromptAssemblyMemory: assembling the prompt of a 100,000-message
// session allocates less than 50 MB (the benchmark's bound on memory; its
// time is the benchmark's to report).
func TestPromptAssemblyMemory(t *testing.T) {
	log, summary := prompttest.Session(prompttest.Messages, 90000)
	tail, start := prompttest.Tail(log)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	l := assemble(t, prompt.NewMemos(), tail, start, summary)
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 50<<20 {
		t.Fatalf("prompt assembly allocated %d MB", got>>20)
	}
	if len(l.req.Turns) == 0 || len(l.req.Turns) >= prompttest.Messages-90000 {
		t.Fatalf("%d turns kept after a cursor at 90,000 of 100,000 in a 128k window", len(l.req.Turns))
	}
}
