package session

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
)

// BenchmarkEngineSend is one durable send to debug/echo through the engine
// alone (no socket, no mount): the cost of the send path itself.
func BenchmarkEngineSend(b *testing.B) {
	env := newEnvTB(b)
	env.send(root0, coder(), `{"op":"send","id":"warm","input":"x"}`)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		env.send(root0, coder(), fmt.Sprintf(`{"op":"send","id":"c%d","input":"hello"}`, i))
	}
}

// BenchmarkEngineAppendLog is one 200-byte line appended as a writer
// through the mount does (AppendLog, no FUSE): the engine's share of
// integration's BenchmarkAppend/fd, allocations included.
func BenchmarkEngineAppendLog(b *testing.B) {
	env := newEnvTB(b)
	env.send(root0, coder(), `{"op":"send","id":"warm","input":"x"}`)
	ref := coderDefault()
	head, tail := `{"role":"user","run":"bench","content":"`, "\"}\n"
	line := []byte(head + strings.Repeat("x", 200-len(head)-len(tail)) + tail)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := env.e.AppendLog(root0, ref, abi.FileMessages, line); err != nil {
			b.Fatal(err)
		}
	}
}
