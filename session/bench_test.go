package session

import (
	"fmt"
	"testing"
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
