package prompt

import (
	"bytes"
	"testing"

	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/agent/modelapi"
	"github.com/ctxfs/ctxfs/agent/prompt/prompttest"
)

// BenchmarkPromptFromSource: the steady prompt of the 100,000-message
// session (its last 4 MiB, the summary at 97,000), read warm as bytes
// (New: the tail read by the caller and compared with the read log's
// copy, as before NewFrom) and from the log itself (NewFrom: only what
// the log gained since, here nothing).
func BenchmarkPromptFromSource(b *testing.B) {
	log, summary := prompttest.Session(prompttest.Messages, 97000)
	budget := (&def.Definition{API: &def.API{Config: modelapi.Config{API: modelapi.OpenAIChat, ModelID: "gpt-4o"}}}).Limits().Prompt()
	b.Run("bytes", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			tail, start := prompttest.Tail(log) // what the engine read at each send
			memos.New(owner0, "Answer briefly.", bytes.Clone(tail), start, summary, budget)
		}
	})
	b.Run("source", func(b *testing.B) {
		b.ReportAllocs()
		src := &growingLog{b: log}
		for b.Loop() {
			memos.NewFrom(owner0, "Answer briefly.", src, 4<<20, summary, budget)
		}
	})
}
