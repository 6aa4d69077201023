package proto

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestMessageText pins the one rule for a message's text on the edge cases
// each former decoder handled: string content, text parts joined with
// nothing between them (what the run streamed and latest.md holds), tool
// parts and invalid parts without text, content of other shapes empty,
// and the "uid" lines appended through the mount carry ignored.
func TestMessageText(t *testing.T) {
	cases := []struct{ line, role, text string }{
		{`{"role":"user","run":"r","content":"hello","ts":"t"}`, "user", "hello"},
		{`{"role":"user","content":"esc \"q\" \u00e9\n"}`, "user", "esc \"q\" é\n"},
		{`{"role":"assistant","content":[{"type":"text","text":"hel"},{"type":"text","text":"lo"}]}`, "assistant", "hello"},
		{`{"role":"assistant","content":[{"type":"text","text":"one"},{"type":"tool_call","id":"c","name":"x","arguments":{}},{"type":"text","text":"two"}]}`, "assistant", "onetwo"},
		{`{"role":"assistant","content":[5,"s",null,{"type":"text","text":7},{"type":"text","text":"ok"},{"text":"untyped"}]}`, "assistant", "ok"},
		{`{"role":"tool","name":"fs.read","content":[{"type":"tool_result","tool_call_id":"c","content":"res"}]}`, "tool", ""},
		{`{"role":"assistant","content":{"type":"text","text":"obj"}}`, "assistant", ""},
		{`{"role":"assistant","content":42}`, "assistant", ""},
		{`{"role":"assistant","content":null}`, "assistant", ""},
		{`{"role":"assistant"}`, "assistant", ""},
		{`{"role":"user","run":"r","content":"through the mount","ts":"t","uid":1001}`, "user", "through the mount"},
		{`{"role":7,"content":"x"}`, "", "x"},
		{`  {"role":"user","content":"padded"}  `, "user", "padded"},
	}
	for _, c := range cases {
		m, err := ParseMessage([]byte(c.line))
		if err != nil {
			t.Fatalf("%s: %v", c.line, err)
		}
		if m.Role != c.role || m.Text() != c.text {
			t.Errorf("%s: role %q text %q, want %q %q", c.line, m.Role, m.Text(), c.role, c.text)
		}
		if got := ContentText(m.Content); got != m.Text() {
			t.Errorf("%s: ContentText %q differs from Text %q", c.line, got, m.Text())
		}
	}
}

// TestParseMessageRefusesNonObjects: a line that is not a JSON object is
// ErrNotMessage (damage the trajectory export reports, and the others skip).
func TestParseMessageRefusesNonObjects(t *testing.T) {
	for _, line := range []string{``, ` `, `[1]`, `"s"`, `{"role":`, `{"role":"user"} x`, `null`} {
		if _, err := ParseMessage([]byte(line)); !errors.Is(err, ErrNotMessage) {
			t.Errorf("%q: err %v, want ErrNotMessage", line, err)
		}
	}
}

// TestMessageToolCalls: tool_call and tool_use parts with an id and a name,
// arguments normalised once (missing → {}, a JSON string holding an object
// → that object, anything else kept).
func TestMessageToolCalls(t *testing.T) {
	m, err := ParseMessage([]byte(`{"role":"assistant","content":[
		{"type":"text","text":"look"},
		{"type":"tool_call","id":"a","name":"fs.read","arguments":{"path":"/x"}},
		{"type":"tool_use","id":"b","name":"ls","input":{"d":1}},
		{"type":"tool_call","id":"c","name":"f","arguments":"{\"k\":2}"},
		{"type":"tool_call","id":"d","name":"g"},
		{"type":"tool_call","id":"e","name":"h","arguments":"not json"},
		{"type":"tool_call","id":"","name":"noid"},
		{"type":"tool_call","id":"f"},
		{"type":"tool_call","id":"g","name":"n","arguments":null},
		7]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []ToolCall{
		{"a", "fs.read", json.RawMessage(`{"path":"/x"}`)},
		{"b", "ls", json.RawMessage(`{"d":1}`)},
		{"c", "f", json.RawMessage(`{"k":2}`)},
		{"d", "g", json.RawMessage(`{}`)},
		{"e", "h", json.RawMessage(`"not json"`)},
		{"g", "n", json.RawMessage(`{}`)},
	}
	if got := m.ToolCalls(); !reflect.DeepEqual(got, want) {
		t.Fatalf("calls\n got %+v\nwant %+v", got, want)
	}
	if m.Text() != "look" {
		t.Fatalf("text %q", m.Text())
	}
}

// TestMessageToolResults: the tool_result parts of a tool message, with
// their call id, content as recorded and is_error only when true.
func TestMessageToolResults(t *testing.T) {
	m, err := ParseMessage([]byte(`{"role":"tool","run":"r","name":"fs.read","uid":0,"content":[
		{"type":"tool_result","tool_call_id":"c1","content":"text","is_error":false},
		{"type":"text","text":"not a result"},
		{"type":"tool_result","tool_call_id":"c2","content":{"k":1},"is_error":true},
		{"type":"tool_result","tool_call_id":3,"is_error":"true"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	got := m.ToolResults()
	if len(got) != 3 || m.Name != "fs.read" || m.Run != "r" {
		t.Fatalf("results %+v of %+v", got, m)
	}
	if got[0].ToolCallID != "c1" || string(got[0].Content) != `"text"` || got[0].IsError {
		t.Errorf("first %+v", got[0])
	}
	if got[1].ToolCallID != "c2" || string(got[1].Content) != `{"k":1}` || !got[1].IsError {
		t.Errorf("second %+v", got[1])
	}
	if got[2].ToolCallID != "" || got[2].Content != nil || got[2].IsError {
		t.Errorf("third (fields of other types) %+v", got[2])
	}
}

// TestMessageParts: a string content is one text part; a part array its
// elements, one that is not an object a part of no type.
func TestMessageParts(t *testing.T) {
	m, _ := ParseMessage([]byte(`{"role":"user","content":"hi"}`))
	if got := m.Parts(); len(got) != 1 || got[0].Type != "text" || got[0].Text != "hi" {
		t.Fatalf("string content: %+v", got)
	}
	m, _ = ParseMessage([]byte(`{"role":"user","content":[1,{"type":"text","text":"a"}]}`))
	if got := m.Parts(); len(got) != 2 || got[0].Type != "" || got[1].Text != "a" {
		t.Fatalf("array: %+v", got)
	}
	m, _ = ParseMessage([]byte(`{"role":"user"}`))
	if got := m.Parts(); got != nil {
		t.Fatalf("no content: %+v", got)
	}
}

// MessageLine: a message frame is its role, run, content and time (an
// assistant's when no role is given); a tool result is a tool message
// holding one tool_result part; every other frame is no line.
func TestMessageLine(t *testing.T) {
	for _, c := range []struct {
		frame, want string
	}{
		{`{"type":"message","content":"hi","run":"r1","ts":"T"}`, `{"role":"assistant","run":"r1","content":"hi","ts":"T"}`},
		{`{"type":"message","role":"user","content":[{"type":"text","text":"q"}],"run":"r1","ts":"T"}`, `{"role":"user","run":"r1","content":[{"type":"text","text":"q"}],"ts":"T"}`},
		{`{"type":"message","run":"r1","ts":"T"}`, `{"role":"assistant","run":"r1","content":"","ts":"T"}`},
		{`{"type":"tool_result","tool_call_id":"c1","name":"sh","content":"out","is_error":true,"run":"r1","ts":"T"}`,
			`{"role":"tool","run":"r1","name":"sh","content":[{"type":"tool_result","tool_call_id":"c1","content":"out","is_error":true}],"ts":"T"}`},
		{`{"type":"delta","text":"x"}`, ``},
		{`{"type":"tool_call","id":"c1","name":"sh"}`, ``},
	} {
		f, err := ParseObject([]byte(c.frame), true)
		if err != nil {
			t.Fatal(err)
		}
		got := MessageLine(f)
		switch {
		case c.want == "" && got != nil:
			t.Errorf("%s: line %s, want none", c.frame, got.Line())
		case c.want != "" && (got == nil || strings.TrimSpace(string(got.Line())) != c.want):
			t.Errorf("%s:\n got %v\nwant %s", c.frame, got, c.want)
		}
	}
}

// ThreadUsage: thread totals become each run's own counts; a run's own
// counts pass as they are; a total that falls is a new thread.
func TestThreadUsage(t *testing.T) {
	var tu ThreadUsage
	for _, c := range []struct {
		in, out      int64
		total        bool
		wantIn, wOut int64
	}{
		{12, 3, true, 12, 3},
		{32, 8, true, 20, 5},
		{7, 1, false, 7, 1},
		{52, 13, true, 20, 5},
		{10, 2, true, 10, 2}, // a new thread
	} {
		in, out := tu.Own(c.in, c.out, c.total)
		if in != c.wantIn || out != c.wOut {
			t.Errorf("Own(%d, %d, %v) = %d, %d; want %d, %d", c.in, c.out, c.total, in, out, c.wantIn, c.wOut)
		}
	}
}

// TestLastOfRole: the last line of the role wins; a line that only
// mentions the role, or is not an object, is not one.
func TestLastOfRole(t *testing.T) {
	lines := []byte(`{"role":"assistant","content":"one"}
{"role":"user","content":"say \"assistant\""}
not json "assistant"
{"role":"assistant","content":"two"}
{"role":"user","content":"x"}
`)
	if o := LastOfRole(lines, "assistant"); o == nil || o.Str("content") != "two" {
		t.Fatalf("got %v", o)
	}
	if o := LastOfRole([]byte(`{"role":"user","content":"assistant"}`+"\n"), "assistant"); o != nil {
		t.Fatalf("a user line taken: %v", o)
	}
}

// contentCases are content values of every shape ContentText reads.
var contentCases = []string{
	`"plain"`, ` "spaced" `, `null`, `12`, `{"type":"text","text":"an object"}`, `[]`, ` [ ] `,
	`[{"type":"text","text":"one"}]`,
	`[{"type":"text","text":"a"},{"type":"tool_call","id":"c","name":"n"},{"TYPE":"text","Text":"b"},{"type":"te\u0078t","text":"c\n"}]`,
	`[{"type":"text","text":"x","text":"last"},1,null,"s",[{"type":"text","text":"nested"}],{"type":"text"},{"type":"text","text":5}]`,
	`[{"type":"text","text":"ok"},{"type":"text","text":"broken"`,
	`[{"type":"text","text":"ok"}] x`,
	`[{"ſype":"text","text":"long s key"}]`,
	"[{\"type\":\"text\",\"text\":\"\xff invalid\"}]",
	`"trailing" `, `"unclosed`, `"unclosed `, "\"00\x84 ", `"ab"c`, `"ab\"`,
}

// TestRawStringMalformed: a value that is not one whole JSON string is
// "", never its bytes cut at the last one; white space around a string is
// read through.
func TestRawStringMalformed(t *testing.T) {
	for raw, want := range map[string]string{
		`"ab"`: "ab", `"ab" `: "ab", `"a\u0062"`: "ab",
		`"ab`: "", `"abc `: "", `"ab"c`: "", `"ab\"`: "", "\"00\x84 ": "", `"a"b"`: "", `"`: "", `ab`: "",
	} {
		if got := RawString(json.RawMessage(raw)); got != want {
			t.Errorf("RawString(%q) = %q, want %q", raw, got, want)
		}
	}
}

// partsText is ContentText as it was before its one-pass read of arrays:
// the text of ContentParts' text parts. (A string with bytes after its
// last quote was once cut short at its last byte by RawString's direct
// cut and read otherwise once trimmed: testdata/fuzz/FuzzContentText.)
func partsText(c json.RawMessage) string {
	return PartsText(ContentParts(c))
}

// TestContentTextAsParts: ContentText is partsText, whatever the
// content's shape.
func TestContentTextAsParts(t *testing.T) {
	for _, c := range contentCases {
		if got, want := ContentText(json.RawMessage(c)), partsText(json.RawMessage(c)); got != want {
			t.Errorf("%s: %q, from the parts %q", c, got, want)
		}
	}
}

// FuzzContentText: any content reads as the text of its parts.
func FuzzContentText(f *testing.F) {
	for _, c := range contentCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, c []byte) {
		if got, want := ContentText(c), partsText(c); got != want {
			t.Fatalf("%s: %q, from the parts %q", c, got, want)
		}
	})
}

func BenchmarkRawString(b *testing.B) {
	for name, s := range map[string]string{
		"text":  strings.Repeat("a line of text, wörds & <tags>; ", 8),
		"ascii": strings.Repeat("a line of text, words & <tags>; ", 8),
		"ts":    "2026-12-03T08:20:04.123456Z",
	} {
		raw := json.RawMessage(`"` + s + `"`)
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if RawString(raw) == "" {
					b.Fatal("empty")
				}
			}
		})
	}
}
