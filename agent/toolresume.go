package agent

import (
	"bytes"

	"github.com/ctxfs/ctxfs/agent/prompt"
	"github.com/ctxfs/ctxfs/proto"
)

// ResumeOf reads where run stood from the end of its session's logs
// (whole lines of messages.jsonl and events.jsonl, the run's lines among
// them): what a run resumed after a restart continues from.
func ResumeOf(run string, msgs, events []byte) *Resume {
	r := &Resume{Announced: map[string]bool{}, AllowRun: map[string]bool{}}
	answered := map[string]bool{}
	for _, line := range bytes.Split(msgs, []byte("\n")) {
		m, err := proto.ParseMessage(line)
		if err != nil || m.Run != run {
			continue
		}
		switch m.Role {
		case "assistant":
			if calls := prompt.ToolCalls(m); len(calls) > 0 {
				r.Pending = calls
			}
		case "tool":
			for _, p := range m.Parts() {
				answered[p.ToolCallID] = true
				r.Steps++
			}
		}
	}
	var left []ToolCall
	for _, c := range r.Pending {
		if !answered[c.ID] {
			left = append(left, c)
		}
	}
	r.Pending = left
	for _, line := range bytes.Split(events, []byte("\n")) {
		ev, err := proto.ParseObject(line, false)
		if err != nil || ev.Str("run") != run {
			continue
		}
		switch ev.Str("type") {
		case proto.FrameToolCall:
			r.Announced[ev.Str("id")] = true
		case proto.FrameApprovalResult:
			if ev.Str("decision") == proto.DecisionAllowRun {
				r.AllowRun[ev.Str("name")] = true
			}
		}
	}
	return r
}
