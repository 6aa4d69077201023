package agent

import (
	"bytes"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/prompt"
	"github.com/ctxfs/ctxfs/proto"
)

// ResumeOf reads where run stood from the end of its session's logs
// (whole lines of messages.jsonl and events.jsonl, the run's lines among
// them): what a run resumed after a restart continues from.
//
// What it runs next is read from the server's own lines alone. Anyone
// who may append to the logs (a member of a shared space; a jailed
// run's shell.exec, which has the session directory) can write a line
// under any run id, an assistant message with calls of their choosing
// under a waiting call's id among them; such a line carries its
// writer's stamp (abi.Stamped) and is passed over. The approval_result
// lines it takes need no such test: the mount refuses them
// (abi.CheckNoHostRecord), and the server's carry the answerer's uid.
func ResumeOf(run string, msgs, events []byte) *Resume {
	r := &Resume{Announced: map[string]bool{}, Used: map[string]bool{}, AllowRun: map[string]bool{}}
	answered := map[string]bool{}
	for _, line := range bytes.Split(msgs, []byte("\n")) {
		if abi.Stamped(line) {
			continue
		}
		m, err := proto.ParseMessage(line)
		if err != nil || m.Run != run {
			continue
		}
		switch m.Role {
		case "assistant":
			if calls := prompt.ToolCalls(m); len(calls) > 0 {
				r.Pending = calls
				for _, c := range calls {
					r.Used[c.ID] = true
				}
			}
		case "tool":
			for _, p := range m.Parts() {
				answered[p.ToolCallID] = true
				r.Used[p.ToolCallID] = true
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
			if !abi.Stamped(line) {
				r.Announced[ev.Str("id")] = true
			}
		case proto.FrameApprovalResult:
			if ev.Str("decision") == proto.DecisionAllowRun {
				r.AllowRun[ev.Str("name")] = true
			}
		}
	}
	return r
}
