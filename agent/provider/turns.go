package provider

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/ctxfs/ctxfs/agent/modelapi"
)

// Both APIs refuse a request whose tool calls and tool results do not pair
// up: a result must answer a call of the assistant message right before it
// (OpenAI's tool messages, Anthropic's tool_result blocks), and every call
// must be answered right after it. A session's history need not be that
// tidy: a run may have been cancelled between a call and its result, or a
// result may come from a program that never recorded the call. plan pairs
// what it can and turns the rest into plain text, so that what is sent is
// always a request the API accepts and nothing of the history is lost.
//
// Both APIs also refuse a request that carries tool calls but does not
// define their tools (Anthropic: tool_use and tool_result blocks need
// tools), and a tool must never be declared that the run does not offer.
// So a call of the history goes out as a call only when its tool is one
// of Request.Tools; a call of any other tool (a run with other tools, a
// tool since removed from the definition, a name the model made up), and
// its result, go out as text.

// planned is one turn after pairing.
type planned struct {
	role   string              // RoleUser, RoleAssistant or RoleTool
	text   string              // user and assistant turns
	calls  []modelapi.ToolCall // assistant: only calls of offered tools whose result follows, names as ctxfs spells them
	result *modelapi.Turn      // tool: a result answering a call of the assistant turn before (the request's own)
}

// plan pairs tool calls with results. A call is kept as a call when its
// id passes idOK, is unique in the request, its tool is offered, and a
// tool turn in the run of tool turns right after its assistant
// turn answers it; such results follow their assistant turn in the order
// they came. Every other call is appended to its assistant's text, and
// every other result becomes user text after the paired results.
func plan(turns []modelapi.Turn, tools offered, idOK func(string) bool) ([]planned, error) {
	return planFrom(turns, tools, idOK, &callIDs{})
}

// planFrom is plan of turns that follow others whose kept calls' ids are
// in used; it adds those of the calls it keeps.
func planFrom(turns []modelapi.Turn, tools offered, idOK func(string) bool, used *callIDs) ([]planned, error) {
	if len(turns) == 0 {
		return nil, fmt.Errorf("the request has no turns")
	}
	out := make([]planned, 0, len(turns))
	for i := 0; i < len(turns); {
		t := turns[i]
		switch t.Role {
		case modelapi.RoleUser:
			out = append(out, planned{role: modelapi.RoleUser, text: t.Text})
			i++
		case modelapi.RoleTool:
			out = append(out, looseResult(t))
			i++
		case modelapi.RoleAssistant:
			j := i + 1
			for j < len(turns) && turns[j].Role == modelapi.RoleTool {
				j++
			}
			out = pairRun(out, t, turns[i+1:j], used, tools, idOK)
			i = j
		default:
			return nil, fmt.Errorf("turn %d: role %q is not %s, %s or %s", i, t.Role, modelapi.RoleUser, modelapi.RoleAssistant, modelapi.RoleTool)
		}
	}
	return out, nil
}

// pairRun appends to out the plan of one assistant turn and the tool
// turns right after it.
func pairRun(out []planned, a modelapi.Turn, results []modelapi.Turn, used *callIDs, tools offered, idOK func(string) bool) []planned {
	if len(a.ToolCalls) == 0 && len(results) == 0 { // most turns of a long conversation
		return append(out, planned{role: modelapi.RoleAssistant, text: a.Text})
	}
	firstResult := map[string]int{} // call id → index of its first result
	for k := len(results) - 1; k >= 0; k-- {
		firstResult[results[k].ToolCallID] = k
	}
	answered := make([]bool, len(results))
	asst := planned{role: modelapi.RoleAssistant, text: a.Text}
	// The calls sent as text are joined once: appended one at a time, each
	// copied all the text before it, and a line of 17,000 calls took
	// seconds at every request that held it.
	var loose []string
	for _, c := range a.ToolCalls {
		k, ok := firstResult[c.ID]
		if ok && c.ID != "" && idOK(c.ID) && tools.has(c.Name) && !used.has(c.ID) {
			used.add(c.ID)
			answered[k] = true
			asst.calls = append(asst.calls, c)
			continue
		}
		loose = append(loose, fmt.Sprintf("[tool call %s]\n%s", label(c.Name, c.ID), c.Arguments))
	}
	if len(loose) > 0 {
		asst.text = joinText(asst.text, strings.Join(loose, "\n\n"))
	}
	out = append(out, asst)
	for k := range results {
		if answered[k] {
			out = append(out, planned{role: modelapi.RoleTool, result: &results[k]})
		}
	}
	for k, r := range results {
		if !answered[k] {
			out = append(out, looseResult(r))
		}
	}
	return out
}

// callIDs is a set of the call ids kept as calls: those of the turns
// before (base, which is never written) and those kept since (own).
type callIDs struct{ base, own map[string]bool }

func (s *callIDs) has(id string) bool { return s.base[id] || s.own[id] }

func (s *callIDs) add(id string) {
	if s.own == nil {
		s.own = map[string]bool{}
	}
	s.own[id] = true
}

// looseResult renders a tool result that answers no call in the request as
// user text that still says what it was.
func looseResult(t modelapi.Turn) planned {
	kind := "result"
	if t.IsError {
		kind = "error"
	}
	return planned{role: modelapi.RoleUser, text: fmt.Sprintf("[tool %s from %s]\n%s", kind, label(t.ToolName, t.ToolCallID), t.Text)}
}

// label names a tool and a call id for text: "NAME (call ID)".
func label(name, id string) string {
	if name == "" {
		name = "a tool"
	}
	if id == "" {
		return name
	}
	return fmt.Sprintf("%s (call %s)", name, id)
}

// joinText appends a paragraph.
func joinText(text, more string) string {
	if text == "" {
		return more
	}
	return text + "\n\n" + more
}

// nameOK says whether s is a function name both APIs accept:
// [a-zA-Z0-9_-]{1,64}.
func nameOK(s string) bool {
	return len(s) <= 64 && idChars(s)
}

// idChars says whether s is non-empty and only [a-zA-Z0-9_-].
func idChars(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// argsObject is a call's arguments as a JSON object, which Anthropic's
// tool_use input must be and OpenAI's arguments string should hold: empty
// arguments are {}, and anything that is not an object is kept whole
// under "arguments".
func argsObject(args string) json.RawMessage {
	s := strings.TrimSpace(args)
	if s == "" {
		return json.RawMessage("{}")
	}
	var obj map[string]json.RawMessage
	if utf8.ValidString(s) && json.Unmarshal([]byte(s), &obj) == nil && obj != nil {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(map[string]string{"arguments": args}) // a map of strings always marshals
	return b
}

// resultText is a tool result's text, marked when the tool failed for an
// API that has no field for it.
func resultText(t modelapi.Turn) string {
	if t.IsError {
		return "[error]\n" + t.Text
	}
	return t.Text
}
