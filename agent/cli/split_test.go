package cli

import (
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/proto"
)

// TestManyCallsAreSplitIntoMessages: parallel tool uses each within
// MaxToolBytes but together over a frame (twenty of 60 KiB, or fewer whose
// '<' JSON escapes into six bytes) are recorded in several assistant
// messages, each a frame that fits, in order (the text, then the calls;
// text after them that the last cannot hold, a message of its own), each
// sent before its calls' results; none is dropped into a log frame.
func TestManyCallsAreSplitIntoMessages(t *testing.T) {
	for _, fill := range []string{"x", "<"} {
		t.Run(fill, func(t *testing.T) {
			a, _ := Lookup(ClaudeCode)
			p := a.NewParser()
			var frames []*proto.Object
			event := func(format string, args ...any) {
				frames = append(frames, p.Parse([]byte(fmt.Sprintf(format, args...)))...)
			}
			event(`{"type":"assistant","message":{"id":"m1","content":[{"type":"text","text":"I will write the files."}]},"parent_tool_use_id":null}`)
			big := strings.Repeat(fill, 60<<10)
			const n = 20
			for i := 0; i < n; i++ {
				event(`{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"t%d","name":"Write","input":{"file_path":"/f%d","content":%q}}]},"parent_tool_use_id":null}`, i, i, big)
			}
			event(`{"type":"assistant","message":{"id":"m1","content":[{"type":"text","text":%q}]},"parent_tool_use_id":null}`, strings.Repeat(fill, MaxTextBytes))
			for i := 0; i < n; i++ {
				event(`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t%d","content":"ok"}]},"parent_tool_use_id":null}`, i)
			}
			last, status := p.Finish(0, nil)
			frames = append(frames, last...)
			checkFrames(t, frames)
			if status != "ok" {
				t.Fatalf("status %q", status)
			}
			var order []string // the parts of the messages, in order
			messages, recorded := 0, map[string]bool{}
			for _, f := range frames {
				switch f.Str("type") {
				case proto.FrameLog:
					t.Fatalf("log frame: %.300s", f.Line())
				case proto.FrameMessage:
					messages++
					for _, part := range proto.MessageOf(f).Parts() {
						switch part.Type {
						case "text":
							order = append(order, "text")
						case "tool_call":
							order = append(order, part.ID)
							recorded[part.ID] = true
						}
					}
				case proto.FrameToolResult:
					if id := f.Str("tool_call_id"); !recorded[id] {
						t.Fatalf("the result of %s comes before a message holds its call", id)
					}
				}
			}
			// A message puts its text first (the second text joins the
			// calls' last message when it fits, or is one of its own).
			var ids []string
			texts := 0
			for _, part := range order {
				if part == "text" {
					texts++
				} else {
					ids = append(ids, part)
				}
			}
			var want []string
			for i := 0; i < n; i++ {
				want = append(want, fmt.Sprintf("t%d", i))
			}
			if order[0] != "text" || texts != 2 || strings.Join(ids, " ") != strings.Join(want, " ") || messages < 2 {
				t.Fatalf("%d messages holding %q", messages, order)
			}
		})
	}
}

// TestCallTooLargeForAMessageIsAnError: a tool use no message can hold
// (an id of megabytes) is an EFBIG error frame and the run's status is
// error, not a log frame and a message silently dropped.
func TestCallTooLargeForAMessageIsAnError(t *testing.T) {
	a, _ := Lookup(ClaudeCode)
	p := a.NewParser()
	frames := p.Parse([]byte(`{"type":"assistant","message":{"id":"m1","content":[{"type":"text","text":"Here."}]},"parent_tool_use_id":null}`))
	frames = append(frames, p.Parse([]byte(fmt.Sprintf(`{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":%q,"name":"Write","input":{}}]},"parent_tool_use_id":null}`,
		strings.Repeat("i", 2*maxFrameBytes))))...)
	last, status := p.Finish(0, nil)
	frames = append(frames, last...)
	checkFrames(t, frames)
	efbig, texts := 0, 0
	for _, f := range frames {
		switch f.Str("type") {
		case proto.FrameError:
			if proto.FrameErrno(f) == syscall.EFBIG {
				efbig++
			}
		case proto.FrameToolCall, proto.FrameLog:
			t.Errorf("frame %.200s", f.Line())
		case proto.FrameMessage:
			texts += len(proto.MessageOf(f).Parts())
		}
	}
	if efbig != 1 || texts != 1 || status != "error" {
		t.Fatalf("%d EFBIG frames, %d parts recorded, status %q: %.600s", efbig, texts, status, lines(frames))
	}
}
