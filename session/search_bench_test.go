package session

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/layout"
)

// BenchmarkSearchQuery: one search over 1,024 sessions of 16 KiB whose
// index is up to date, for a query found nowhere: the index's own cost
// per query and per session (what the search remembers of each).
func BenchmarkSearchQuery(b *testing.B) {
	env := newEnvTB(b)
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range 1024 {
		name := fmt.Sprintf("s%04d", i)
		env.send(root0, coder(), fmt.Sprintf(`{"op":"send","id":"c%d","session":%q,"input":"x"}`, i, name))
		var lines bytes.Buffer
		for lines.Len() < 16<<10 {
			lines.Write(proto.NewObject("role", "user", "run", "r", "content", randomCJK(rng, 200)).Line())
		}
		ref := layout.Ref{Container: layout.Container{Home: "home/0", Kind: "agent", Owner: "coder"}, Name: name}
		testkit.Must(b, env.e.AppendLog(root0, ref, "messages.jsonl", lines.Bytes()))
	}
	for range 2 { // the first builds the index, the second checks it
		if _, err := env.do(root0, coder(), searchLine("鳕鱼肝油")); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		env.do(root0, coder(), searchLine("鳕鱼肝油"))
	}
}
