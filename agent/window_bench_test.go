package agent

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/agent/modelapi"
	"github.com/ctxfs/ctxfs/agent/window"
	"github.com/ctxfs/ctxfs/proto"
)

// benchMessages is the session of the benchmark: 100,000 messages.
const benchMessages = 100000

// benchLog is a messages.jsonl of n messages, users and assistants in
// turn, about 150 bytes a line, and the summary.md whose cursor names
// message at (counted from 1).
func benchLog(n, at int) (log, summary []byte) {
	var b strings.Builder
	var cursor window.Cursor
	for i := 1; i <= n; i++ {
		role := "user"
		if i%2 == 0 {
			role = "assistant"
		}
		line := fmt.Sprintf(`{"run":"ctx-%032x","ts":1700000000,"role":%q,"content":[{"type":"text","text":"message %d: the build of the parser fails on line %d"}]}`, i/2, role, i, i)
		b.WriteString(line + "\n")
		if i == at {
			cursor = window.Cursor{End: int64(b.Len()), Hash: window.LineHash([]byte(line))}
		}
	}
	return []byte(b.String()), window.FormatSummary(cursor, strings.Repeat("The user works on a parser. ", 100))
}

// logTail is the engine's view of a log: its last 4 MiB from a whole line
// (sealedlog.Log.Tail), and where that starts.
func logTail(log []byte) ([]byte, int64) {
	off := max(0, len(log)-4<<20)
	t := log[off:]
	if off > 0 {
		i := strings.IndexByte(string(t[:4096]), '\n')
		t, off = t[i+1:], off+i+1
	}
	return t, int64(off)
}

// assemble is the prompt assembly of a model run: the prompt from the
// log and the summary (NewPrompt), then fitted to a 128k window
// (truncate: the oldest turns cut, the summary kept with a new cursor).
func assemble(tb testing.TB, log []byte, start int64, summary []byte) *toolLoop {
	defn := &def.Definition{Kind: "agent", Name: "b", API: &def.API{Config: modelapi.Config{API: modelapi.OpenAIChat, ModelID: "gpt-4o"}}, WindowDef: def.WindowDef{Strategy: def.CompactTruncate}}
	p := NewPrompt(owner0, "Answer briefly.", log, start, summary, defn.Limits().Prompt())
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
// an assembly. "cold" empties the caches of parsed turns and read logs
// (promptTurns, promptLogs) before each assembly, as a session's first run after the server
// started finds it; "warm" keeps it, as the session's next run does.
func BenchmarkPromptAssembly(b *testing.B) {
	for _, c := range []struct {
		name string
		at   int
	}{{"steady", 97000}, {"stale", 90000}} {
		log, summary := benchLog(benchMessages, c.at)
		tail, start := logTail(log)
		for _, cold := range []bool{true, false} {
			b.Run(c.name+map[bool]string{true: "/cold", false: "/warm"}[cold], func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if cold {
						promptTurns = newTurnCache(turnCacheBytes, turnUidBytes)
						promptLogs = newLogMemo(logMemoBytes, logMemoEntries)
					}
					assemble(b, tail, start, summary)
				}
			})
		}
	}
}

// TestPromptAssemblyMemory: assembling the prompt of a 100,000-message
// session allocates less than 50 MB (the benchmark's bound on memory; its
// time is the benchmark's to report).
func TestPromptAssemblyMemory(t *testing.T) {
	log, summary := benchLog(benchMessages, 90000)
	tail, start := logTail(log)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	l := assemble(t, tail, start, summary)
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 50<<20 {
		t.Fatalf("prompt assembly allocated %d MB", got>>20)
	}
	if len(l.req.Turns) == 0 || len(l.req.Turns) >= benchMessages-90000 {
		t.Fatalf("%d turns kept after a cursor at 90,000 of 100,000 in a 128k window", len(l.req.Turns))
	}
}

// BenchmarkPromptFromSource: the steady prompt of the 100,000-message
// session (its last 4 MiB, the summary at 97,000), read warm as bytes
// (NewPrompt: the tail read by the caller and compared with the read
// log's copy, as before NewPromptFrom) and from the log itself
// (NewPromptFrom: only what the log gained since, here nothing).
func BenchmarkPromptFromSource(b *testing.B) {
	log, summary := benchLog(benchMessages, 97000)
	budget := (&def.Definition{API: &def.API{Config: modelapi.Config{API: modelapi.OpenAIChat, ModelID: "gpt-4o"}}}).Limits().Prompt()
	b.Run("bytes", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			tail, start := logTail(log) // what the engine read at each send
			NewPrompt(owner0, "Answer briefly.", bytes.Clone(tail), start, summary, budget)
		}
	})
	b.Run("source", func(b *testing.B) {
		b.ReportAllocs()
		src := &growingLog{b: log}
		for b.Loop() {
			NewPromptFrom(owner0, "Answer briefly.", src, 4<<20, summary, budget)
		}
	})
}
