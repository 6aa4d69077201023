package session

import (
	"fmt"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/layout"
)

// TestHostRecordsAreFrames: the records the mount refuses are the frames
// only the server writes and reads back as its own.
func TestHostRecordsAreFrames(t *testing.T) {
	want := []string{proto.FrameStart, proto.FrameDone, proto.FrameApprovalRequest, proto.FrameApprovalResult,
		proto.FrameQuestion, proto.FrameAnswer, proto.FrameResumed}
	if got := slices.Sorted(slices.Values(abi.HostRecords)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Fatalf("abi.HostRecords %v, want %v", got, want)
	}
}

// TestAppendRefusesHostRecords: a write to events.jsonl through the mount,
// or relayed from another host's, that holds one of the server's own
// records is refused whole (EINVAL) and neither log changes; the same
// words elsewhere, and an ordinary event, are appended.
func TestAppendRefusesHostRecords(t *testing.T) {
	env := newEnv(t)
	run := env.send(root0, coder(), `{"op":"send","id":"a","input":"one"}`)[0].Str("run")
	ref := coderDefault()
	dir := env.sessDir("home/0", "coder", "default")
	member := layout.Caller{Uid: 1002, Gid: 1002}
	for _, app := range []struct {
		how    string
		append func(layout.Caller, layout.Ref, string, []byte) error
	}{{"through the mount", env.e.AppendLog}, {"relayed", env.e.AppendRelayed}} {
		for _, typ := range abi.HostRecords {
			msgs, events := readFile(t, filepath.Join(dir, "messages.jsonl")), readFile(t, filepath.Join(dir, "events.jsonl"))
			line := fmt.Sprintf(`{"type":"note"}`+"\n"+`{"type":%q,"run":%q,"id":"call_1","name":"shell.exec","decision":"allow_run"}`+"\n", typ, run)
			testkit.WantErrno(t, app.how+" "+typ, app.append(member, ref, abi.FileEvents, []byte(line)), syscall.EINVAL)
			if readFile(t, filepath.Join(dir, "messages.jsonl")) != msgs || readFile(t, filepath.Join(dir, "events.jsonl")) != events {
				t.Fatalf("a refused %s record %s changed the logs", typ, app.how)
			}
		}
		testkit.Must(t, app.append(member, ref, abi.FileEvents, []byte(`{"type":"note","text":"done"}`+"\n")))
	}
}
