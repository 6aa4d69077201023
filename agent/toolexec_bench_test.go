package agent

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/proto"
)

// BenchmarkToolOverhead: the wall time of one built-in tool call against
// the same work done directly, outside a jail and in one: fs.read of a
// small file against a read by the server, and shell.exec of true against
// a bare fork and exec of true as the uid (outside) or a run of true in
// the same jail (Run with busybox as the program). Run with
// -benchtime=200x; the ms/op of each pair side by side is the overhead.
func BenchmarkToolOverhead(b *testing.B) {
	s := toolSpec(b, 1001)
	ownedFile(b, filepath.Join(s.Dir, "small"), "a small file\n", 0o644, 1001)
	ctx := context.Background()
	call := func(b *testing.B, s Spec, name, args string) {
		for i := 0; i < b.N; i++ {
			if out, isErr := ExecTool(ctx, s, ToolCall{ID: "b", Name: name, Arguments: args}, nil); isErr {
				b.Fatal(out)
			}
		}
	}
	b.Run("read/direct", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := os.ReadFile(filepath.Join(s.Dir, "small")); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("read/tool", func(b *testing.B) { call(b, s, "fs.read", `{"path":"small"}`) })
	b.Run("exec/direct", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			cmd := exec.Command("/bin/true")
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001, Groups: []uint32{}}}
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("exec/tool", func(b *testing.B) { call(b, s, "shell.exec", `{"argv":["true"]}`) })

	js, root := jailedToolSpec(b, 1001)
	ownedFile(b, filepath.Join(root, "work", "small"), "a small file\n", 0o644, 1001)
	b.Run("jail/read/tool", func(b *testing.B) { call(b, js, "fs.read", `{"path":"small"}`) })
	b.Run("jail/exec/direct", func(b *testing.B) {
		rs := js
		rs.Def = &Definition{Kind: js.Def.Kind, Name: "true", Program: "/bin/busybox", ABI: ABIText, Isolation: IsolationChroot}
		for i := 0; i < b.N; i++ {
			if !Run(ctx, rs, func(*proto.Object) {}) {
				b.Fatal("true failed in the jail")
			}
		}
	})
	b.Run("jail/exec/tool", func(b *testing.B) { call(b, js, "shell.exec", `{"argv":["true"]}`) })
}
