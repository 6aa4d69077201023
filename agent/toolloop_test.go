package agent

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/proto"
)

// TestCallsMessagesFitALine: a reply's text and calls go in one message
// when its line fits; a long text goes first in messages of its own, each
// line within the bound; calls no line can hold are EFBIG, the text's
// messages returned all the same.
func TestCallsMessagesFitALine(t *testing.T) {
	call := ToolCall{ID: "c1", Name: "shell.exec", Arguments: `{"argv":["true"]}`}
	if msgs, err := callsMessages("short", []ToolCall{call}); err != nil || len(msgs) != 1 {
		t.Fatalf("a short reply: %d messages, %v", len(msgs), err)
	}
	text := strings.Repeat("\x01é", 400<<10) // escaped six times over: 2.4 MiB as JSON
	msgs, err := callsMessages(text, []ToolCall{call})
	if err != nil || len(msgs) < 3 {
		t.Fatalf("a long text: %d messages, %v", len(msgs), err)
	}
	var got strings.Builder
	for i, m := range msgs {
		if !fitsLine(m) {
			t.Fatalf("message %d: a line of %d bytes", i, len(m.Line()))
		}
		if i < len(msgs)-1 {
			got.WriteString(proto.MessageOf(m).Text())
		}
	}
	if got.String() != text || !strings.Contains(string(msgs[len(msgs)-1].Line()), `"id":"c1"`) {
		t.Fatalf("the text was not kept whole before the calls")
	}
	big := ToolCall{ID: "c2", Name: "fs.write", Arguments: `{"path":"x","content":"` + strings.Repeat("y", abi.MaxLineBytes) + `"}`}
	msgs, err = callsMessages("before", []ToolCall{call, big})
	if !errors.Is(err, syscall.EFBIG) || len(msgs) != 1 || proto.MessageOf(msgs[0]).Text() != "before" {
		t.Fatalf("calls over a line: %d messages, %v", len(msgs), err)
	}
}
