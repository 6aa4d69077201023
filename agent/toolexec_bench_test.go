package agent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/proto"
)

// BenchmarkToolOverhead: the wall time of one built-in tool call against
// the same work done directly, outside a jail and in one. "tool" is a
// call of a run that made one before (its tool process is running: what
// every call but the first costs); "first" is a run's first call, which
// starts the process (ExecTool alone). The references: a read by the
// server for fs.read; for shell.exec of true, a fork and exec of true as
// the uid by the server (outside), and inside the jail a fork and exec of
// /bin/true by a jailed shell, its jail's setup taken away (in-jail);
// jail/run is a whole jailed run of true (setup included). Run with
// -benchtime=20x or more; the ns/op of each row side by side is the
// overhead (history in docs/benchmarks.md).
func BenchmarkToolOverhead(b *testing.B) {
	s := toolSpec(b, 1001)
	ownedFile(b, filepath.Join(s.Dir, "small"), "a small file\n", 0o644, 1001)
	b.Run("read/direct", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := os.ReadFile(filepath.Join(s.Dir, "small")); err != nil {
				b.Fatal(err)
			}
		}
	})
	benchToolCalls(b, "", s, "fs.read", `{"path":"small"}`)
	b.Run("exec/direct", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			cmd := exec.Command("/bin/true")
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001, Groups: []uint32{}}}
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	benchToolCalls(b, "", s, "shell.exec", `{"argv":["true"]}`)

	js, root := jailedToolSpec(b, 1001)
	ownedFile(b, filepath.Join(root, "work", "small"), "a small file\n", 0o644, 1001)
	benchToolCalls(b, "jail/", js, "fs.read", `{"path":"small"}`)
	b.Run("jail/exec/in-jail", func(b *testing.B) {
		// Ten execs an op, so that the jail's setup, taken away, weighs
		// less in the figure than the noise of one setup.
		empty := jailedShell(b, js, 0)
		b.ResetTimer()
		full := jailedShell(b, js, 10*b.N)
		b.ReportMetric(float64(full-empty)/float64(10*b.N), "ns/op")
	})
	b.Run("jail/run", func(b *testing.B) {
		rs := js
		rs.Def = &def.Definition{Kind: js.Def.Kind, Name: "true", Program: "/bin/busybox", ABI: def.ABIText, Isolation: def.IsolationChroot}
		for i := 0; i < b.N; i++ {
			if !Run(context.Background(), rs, func(*proto.Object) {}) {
				b.Fatal("true failed in the jail")
			}
		}
	})
	benchToolCalls(b, "jail/", js, "shell.exec", `{"argv":["true"]}`)
}

// benchToolCalls measures a call of name as a run's later calls
// (PREFIX/OP/tool) and as its first (PREFIX/OP/first).
func benchToolCalls(b *testing.B, prefix string, s Spec, name, args string) {
	op := map[string]string{"fs.read": "read", "shell.exec": "exec"}[name]
	call := ToolCall{ID: "b", Name: name, Arguments: args}
	ctx := context.Background()
	b.Run(prefix+op+"/tool", func(b *testing.B) {
		ts := newToolSession(s)
		defer ts.close()
		if out, isErr := ts.exec(ctx, call, nil); isErr { // the run's first call
			b.Fatal(out)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if out, isErr := ts.exec(ctx, call, nil); isErr {
				b.Fatal(out)
			}
		}
	})
	b.Run(prefix+op+"/first", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if out, isErr := ExecTool(ctx, s, call, nil); isErr {
				b.Fatal(out)
			}
		}
	})
}

// jailedShell times a jailed busybox sh that runs /bin/true n times.
func jailedShell(b *testing.B, js Spec, n int) time.Duration {
	rs := js
	rs.Def = &def.Definition{Kind: js.Def.Kind, Name: "sh", Program: "/bin/busybox", ABI: def.ABIText, Isolation: def.IsolationChroot}
	rs.Input = fmt.Sprintf("i=0; while [ $i -lt %d ]; do /bin/true; i=$((i+1)); done\n", n)
	start := time.Now()
	if !Run(context.Background(), rs, func(*proto.Object) {}) {
		b.Fatal("sh failed in the jail")
	}
	return time.Since(start)
}
