package proto

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/ctxfs/ctxfs/internal/jsonscan"
)

// Message is one messages.jsonl line (SPEC 6): what the engine, search,
// the trajectory export and the ctx client read of it. Strings are read
// leniently (a field of another type reads as ""), because a line
// appended through the mount may carry anything a JSON object can; extra
// fields (the "uid" of a line appended through the mount, …) are ignored.
type Message struct {
	Role, Run, Name, TS string
	Content             json.RawMessage // as recorded: a string, an array of parts, or anything
}

// Part is one element of a content array: text, a tool call or a tool
// result. An element that is not an object is a Part of no type.
type Part struct {
	Type, Text, ID, Name, ToolCallID string
	Arguments, Input, Content        json.RawMessage // as recorded
	IsError                          bool
	// RawID and RawName are id and name as recorded, for a reader that
	// must refuse a value of another type rather than read it as ""
	// (the trajectory export, whose validation names it).
	RawID, RawName json.RawMessage
}

// ToolCall is a tool call of an assistant message, its arguments
// normalised (ToolArguments).
type ToolCall struct {
	ID, Name  string
	Arguments json.RawMessage
}

// ErrNotMessage is a line that is not a JSON object.
var ErrNotMessage = errors.New("not a JSON object")

// RawFields are the members of a log line or of a content part that
// readers of the logs use, each as recorded, so that one of another type
// fails nothing (read strings with RawString). One shape serves lines and
// parts: the trajectory export embeds it to read both logs.
type RawFields struct {
	// Matched by name, as encoding/json matches tags: without case.
	Type, Role, Run, TS, ID, Name, Text, Arguments, Input, Content json.RawMessage
	ToolCallID                                                     json.RawMessage `json:"tool_call_id"`
	IsError                                                        json.RawMessage `json:"is_error"`
}

// ParseMessage reads one messages.jsonl line; ErrNotMessage when it is not
// a JSON object (white space around it is allowed).
func ParseMessage(line []byte) (Message, error) {
	var w RawFields
	if t := bytes.TrimSpace(line); len(t) == 0 || t[0] != '{' || json.Unmarshal(t, &w) != nil {
		return Message{}, ErrNotMessage
	}
	return Message{Role: RawString(w.Role), Run: RawString(w.Run), Name: RawString(w.Name), TS: RawString(w.TS), Content: w.Content}, nil
}

// Text is the message's text: the one rule (ContentText).
func (m Message) Text() string { return ContentText(m.Content) }

// Parts are the content's parts: a string content is one text part; an
// array its elements; anything else (missing, null, a number) none.
func (m Message) Parts() []Part { return ContentParts(m.Content) }

// ToolCalls are the tool calls among the parts ("tool_call", or
// "tool_use" as a jsonl agent may record it) that have an id and a name,
// in order.
func (m Message) ToolCalls() []ToolCall { return PartsToolCalls(m.Parts()) }

// PartsToolCalls are Message.ToolCalls of parts already read (one decode
// of a message's content for a reader that needs more of it).
func PartsToolCalls(parts []Part) []ToolCall {
	var calls []ToolCall
	for _, p := range parts {
		if (p.Type == "tool_call" || p.Type == "tool_use") && p.ID != "" && p.Name != "" {
			args := p.Arguments
			if args == nil {
				args = p.Input
			}
			calls = append(calls, ToolCall{ID: p.ID, Name: p.Name, Arguments: ToolArguments(args)})
		}
	}
	return calls
}

// ToolResults are the "tool_result" parts, in order.
func (m Message) ToolResults() []Part {
	var results []Part
	for _, p := range m.Parts() {
		if p.Type == "tool_result" {
			results = append(results, p)
		}
	}
	return results
}

// ContentText is the text of a message's content, the one rule everyone
// reads a message by: a string content as it is, else the text of its
// "text" parts joined as they are, with nothing between them (the text
// the run streamed, and what latest.md holds, SPEC 5); content of any
// other shape has no text.
func ContentText(content json.RawMessage) string {
	content = bytes.TrimSpace(content) // as ContentParts, whose text this is
	if len(content) > 0 && content[0] == '"' {
		return RawString(content)
	}
	if len(content) == 0 || content[0] != '[' {
		return PartsText(ContentParts(content))
	}
	// An array: only its text parts' type and text are read, in one pass
	// (jsonscan), not every part's members by reflection (ContentParts);
	// the same text (FuzzContentText).
	var first string // the text of the first text part, while it is the only one
	var more strings.Builder
	n := 0
	var v [2][]byte
	ok := jsonscan.Elements(content, func(e []byte) {
		if e[0] != '{' || !textPartFields.Object(e, v[:]) || RawString(v[0]) != "text" {
			return
		}
		switch n++; n {
		case 1:
			first = RawString(v[1])
		case 2:
			more.WriteString(first)
			fallthrough
		default:
			more.WriteString(RawString(v[1]))
		}
	})
	switch {
	case !ok:
		return ""
	case n > 1:
		return more.String()
	}
	return first
}

// textPartFields are the members of a part ContentText reads.
var textPartFields = jsonscan.NewFields("type", "text")

// PartsText is ContentText of parts already read (ContentParts).
func PartsText(parts []Part) string {
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// HasTextShape says whether content has a shape a message's content may
// have: missing, null, a string or an array of parts. Other shapes (a
// number, an object) hold no text, which readers that count damage count.
func HasTextShape(content json.RawMessage) bool {
	content = bytes.TrimSpace(content)
	return len(content) == 0 || string(content) == "null" || content[0] == '"' || content[0] == '['
}

// ContentParts reads a content value as parts (Message.Parts).
func ContentParts(content json.RawMessage) []Part {
	content = bytes.TrimSpace(content)
	if len(content) == 0 {
		return nil
	}
	switch content[0] {
	case '"':
		return []Part{{Type: "text", Text: RawString(content)}}
	case '[':
		var parts []Part
		if json.Unmarshal(content, &parts) != nil {
			return nil
		}
		return parts
	}
	return nil
}

// UnmarshalJSON reads a part leniently: an element that is not an object,
// or a field of another type, fails nothing.
func (p *Part) UnmarshalJSON(b []byte) error {
	var w RawFields
	if json.Unmarshal(b, &w) != nil {
		*p = Part{}
		return nil
	}
	*p = w.Part()
	return nil
}

// Part is the part whose members are w (UnmarshalJSON), for a reader that
// has cut a part's members out of its line itself; the part keeps w's
// raw values, not copies of them.
func (w *RawFields) Part() Part {
	return Part{Type: RawString(w.Type), Text: RawString(w.Text), ID: RawString(w.ID), Name: RawString(w.Name),
		ToolCallID: RawString(w.ToolCallID), Arguments: w.Arguments, Input: w.Input, Content: w.Content,
		IsError: string(w.IsError) == "true", RawID: w.ID, RawName: w.Name}
}

// ToolArguments normalises a tool call's arguments as recorded: none (or
// null) are {}, a JSON string that holds a JSON object (as OpenAI sends
// them) is that object, anything else is kept as it is.
func ToolArguments(args json.RawMessage) json.RawMessage {
	switch {
	case len(args) == 0 || string(args) == "null":
		return json.RawMessage("{}")
	case args[0] == '"':
		if s := RawString(args); json.Valid([]byte(s)) && strings.HasPrefix(strings.TrimSpace(s), "{") {
			return json.RawMessage(s)
		}
	}
	return args
}

// RawString is raw as a string, or "" when it is not one. Most strings of
// the logs (roles, run ids, timestamps) have no escapes: they are cut out
// directly, which halves the time of reading a line. Anything else, a
// string with white space around it or a malformed one, is read by
// encoding/json: a value that does not end in its closing quote is never
// cut short at its last byte. (A raw control byte, which JSON refuses in
// a string and no checked line holds, is cut out as it stands: looking
// for one cost a long string a sixth more.)
func RawString(raw json.RawMessage) string {
	if len(raw) < 2 || raw[0] != '"' {
		return ""
	}
	if inner := raw[1 : len(raw)-1]; raw[len(raw)-1] == '"' && bytes.IndexByte(inner, '\\') < 0 && bytes.IndexByte(inner, '"') < 0 && utf8.Valid(inner) {
		return string(inner)
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// MessageOf is the message an object already parsed holds (a line the
// engine records or reads back, a message frame).
func MessageOf(o *Object) Message {
	return Message{Role: o.Str("role"), Run: o.Str("run"), Name: o.Str("name"), TS: o.Str("ts"), Content: o.Raw("content")}
}

// MessageLine is the messages.jsonl line of a stamped frame, or nil: a
// message as {"role",…}, a tool result as a tool message.
func MessageLine(fr *Object) *Object {
	switch fr.Str("type") {
	case FrameMessage:
		return NewObject("role", roleOf(fr), "run", fr.Raw("run"), "content", contentOf(fr), "ts", fr.Raw("ts"))
	case FrameToolResult:
		res := NewObject("type", "tool_result", "tool_call_id", fr.Raw("tool_call_id"), "content", contentOf(fr), "is_error", string(fr.Raw("is_error")) == "true")
		msg := NewObject("role", "tool", "run", fr.Raw("run"))
		if name := fr.Raw("name"); name != nil {
			msg.Set("name", name)
		}
		msg.Set("content", []*Object{res})
		msg.Set("ts", fr.Raw("ts"))
		return msg
	}
	return nil
}

func roleOf(f *Object) string {
	if r, ok := f.String("role"); ok {
		return r
	}
	return "assistant"
}

func contentOf(f *Object) json.RawMessage {
	if c := f.Raw("content"); c != nil {
		return c
	}
	return json.RawMessage(`""`)
}

// LastOfRole is the last of lines (JSON objects, one a line) whose role is
// role (a plain word, which JSON writes as is), or nil. Only a line
// holding the role's JSON string is parsed: a writer's stream of other
// lines is looked at once, with no parse and no copy.
func LastOfRole(lines []byte, role string) *Object {
	quoted := []byte(`"` + role + `"`)
	if !bytes.Contains(lines, quoted) {
		return nil
	}
	var last *Object
	for line := range bytes.Lines(lines) {
		if !bytes.Contains(line, quoted) {
			continue
		}
		if o, err := ParseObject(bytes.TrimSuffix(line, []byte("\n")), false); err == nil && o.Str("role") == role {
			last = o
		}
	}
	return last
}
