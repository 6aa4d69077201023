package trajectory

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/proto"
)

// The lines were read with json.Unmarshal into structs of RawMessage
// fields until they were cut out in one pass (jsonscan). refMessage and
// refEvent are that reading, kept as the reference the new one must agree
// with on every line, damaged or hostile ones first.

type refWire struct {
	proto.RawFields
	Model        json.RawMessage `json:"model"`
	InputTokens  json.RawMessage `json:"input_tokens"`
	OutputTokens json.RawMessage `json:"output_tokens"`
	ThreadTotal  json.RawMessage `json:"thread_total"`
}

type refEventWire struct {
	Type, Run, TS, ID, Name, Arguments json.RawMessage
	Model                              json.RawMessage `json:"model"`
	InputTokens                        json.RawMessage `json:"input_tokens"`
	OutputTokens                       json.RawMessage `json:"output_tokens"`
	ThreadTotal                        json.RawMessage `json:"thread_total"`
}

func refDecode(b []byte, w any) error {
	if b[0] != '{' || json.Unmarshal(b, w) != nil {
		return errors.New("not a JSON object")
	}
	return nil
}

// refInteger is integer as it was: strconv.ParseInt of anything.
func refInteger(raw json.RawMessage) *int64 {
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return nil
	}
	return &n
}

func refMessage(b []byte) (*logLine, error) {
	var w refWire
	if err := refDecode(b, &w); err != nil {
		return nil, err
	}
	l := &logLine{
		typ: str(w.Type), role: str(w.Role), run: str(w.Run), ts: str(w.TS),
		id: str(w.ID), model: str(w.Model),
		rawID: w.ID, rawName: w.Name, arguments: w.Arguments,
		prompt: refInteger(w.InputTokens), completion: refInteger(w.OutputTokens),
		threadTotal: string(w.ThreadTotal) == "true",
	}
	l.stamp()
	switch l.role {
	case "user", "system":
		l.text = messageText(w.Content)
	case "assistant":
		l.parts = proto.ContentParts(w.Content)
		l.text = partsText(w.Content, l.parts)
	case "tool":
		l.parts = proto.ContentParts(w.Content)
	}
	return l, nil
}

func refEvent(b []byte) (*logLine, error) {
	var w refEventWire
	if err := refDecode(b, &w); err != nil {
		return nil, err
	}
	l := &logLine{
		typ: str(w.Type), run: str(w.Run), ts: str(w.TS), id: str(w.ID), model: str(w.Model),
		rawID: w.ID, rawName: w.Name, arguments: w.Arguments,
		prompt: refInteger(w.InputTokens), completion: refInteger(w.OutputTokens),
		threadTotal: string(w.ThreadTotal) == "true",
	}
	l.stamp()
	return l, nil
}

// hostileLines are lines of either log: ordinary ones, and every way one
// can be damaged or odd that the reading must treat as it did.
var hostileLines = []string{
	`{"role":"user","run":"r","content":"hello","ts":"2026-01-02T03:04:05Z"}`,
	`{"role":"assistant","run":"r","content":[{"type":"text","text":"a"},{"type":"tool_call","id":"c","name":"sh","arguments":{"x": 1}},{"type":"text","text":"b"}],"ts":"2026-01-02T03:04:05.5+01:00"}`,
	`{"role":"tool","run":"r","name":"sh","content":[{"type":"tool_result","tool_call_id":"c","content":"out","is_error":true}],"ts":"2026-01-02T03:04:05Z"}`,
	`{"role":"tool","content":[5,"s",null,[1],{"type":"tool_result","tool_call_id":7,"content":{"a" : [1, 2]}},{"TYPE":"tool_result","Tool_Call_ID":"c","IS_ERROR":"true"}]}`,
	`{"role":"assistant","content":[]}`, `{"role":"assistant","content":[ ]}`, `{"role":"assistant","content":{"type":"text"}}`, `{"role":"assistant","content":42}`, `{"role":"assistant","content":null}`,
	`{"role":"assistant","content":[{"type":"tool_call","id":1,"name":["x"],"arguments":"{\"a\":1}"},{"type":"tool_use","id":"u","name":"n","input":{}}]}`,
	`{"role":"system","content":"s\u00e9\n\"q\"","ts":"2026-01-02T03:04:05,5Z"}`, `{"role":"user","content":"` + "\xff\xfe" + `"}`,
	`{"Role":"user","ROLE":"assistant","content":"last wins"}`, `{"r\u006fle":"user","content":"escaped key"}`, `{"rolE":"user","conteNt":"x","tſ":"2026-01-02T03:04:05Z"}`,
	`{"type":"tool_call","id":"c1","name":"sh","arguments":{"command":"ls"},"run":"r","ts":"2026-01-02T03:04:05Z"}`,
	`{"type":"usage","model":"m","input_tokens":100,"output_tokens":7,"thread_total":true,"run":"r"}`,
	`{"type":"usage","input_tokens":1.5,"output_tokens":-3,"thread_total":"true"}`, `{"type":"usage","input_tokens":1e3,"output_tokens":99999999999999999999}`,
	`{"type":"usage","input_tokens":"5","output_tokens":null}`, `{"type":"done","run":null,"ts":7}`,
	`{"role":"user","content":"x"} `, `{"role":"user","content":"x"}}`, `{"role":"user","content":"x"`, `{"role":"user","content":"x",}`,
	`{"role":"user","content":"a` + "\x01" + `b"}`, `{"role":"user","content":"\q"}`, `{"role":"user","content":[1,]}`, `{"role":"user","content":01}`,
	`[{"role":"user"}]`, `"role"`, `null`, `1`, `{}`, `{"":1}`, `{"a":{"b":{"c":[[[]]]}}}`,
}

// TestParseAgreesWithReference: each hostile line on its own, and all of
// them in a row (a line's run is given again when it repeats; with runs
// that repeat, escaped, and of other types between them).
func TestParseAgreesWithReference(t *testing.T) {
	for _, line := range hostileLines {
		checkParse(t, []byte(line))
	}
	var all []byte
	for _, line := range hostileLines {
		all = append(append(all, line...), '\n')
	}
	for _, run := range []string{`"r"`, `"r"`, `"\u0072"`, `"r"`, `7`, `null`, `"r"`, `""`, ``, `"r2"`, "\"\xff\"", "\"\xff\""} {
		if run != "" {
			run = `,"run":` + run
		}
		all = append(all, `{"role":"user","content":"x"`+run+`}`+"\n"...)
		all = append(all, `{"type":"start"`+run+`}`+"\n"...)
	}
	checkParse(t, all)
}

func FuzzParseLine(f *testing.F) {
	for _, line := range hostileLines {
		f.Add([]byte(line))
	}
	f.Add([]byte(`{"run":"r"}` + "\n" + `{"run":"\u0072"}` + "\n" + `{"run":"r"}`))
	f.Fuzz(func(t *testing.T, b []byte) { checkParse(t, b) })
}

// checkParse: both logs' readings of the lines of b, in a row, agree with
// the reference: the same error, or the same line.
func checkParse(t *testing.T, b []byte) {
	t.Helper()
	var runs [2]recent
	for _, line := range bytes.Split(b, []byte("\n")) {
		line = bytes.TrimSpace(line) // as lineSource gives lines
		if len(line) == 0 {
			continue
		}
		for i, p := range []struct {
			name string
			got  func([]byte, *logLine, *recent) error
			want func([]byte) (*logLine, error)
		}{{"message", parseMessage, refMessage}, {"event", parseEvent, refEvent}} {
			buf := bytes.Clone(line)
			got := &logLine{typ: "stale", text: "stale", parts: []proto.Part{{}}, prompt: new(int64), at: time.Now()} // a slot used before
			gerr := p.got(buf, got, &runs[i])
			if gerr != nil {
				got = nil
			}
			for i := range buf { // the scanner reads the next line over it
				buf[i] = 'x'
			}
			want, werr := p.want(bytes.Clone(line))
			if (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() {
				t.Fatalf("%s %q: error %v, reference %v", p.name, line, gerr, werr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s %q:\n got %#v\nwant %#v", p.name, line, got, want)
			}
		}
	}
}

// TestDamagedLineDeep: a damaged line far into either log (many batches
// read ahead, their arrays read into again) fails the export with EIO at
// its log and line, whatever the damage, as json.Unmarshal would refuse
// it.
func TestDamagedLineDeep(t *testing.T) {
	const good = 3000
	var valid strings.Builder
	for i := range good {
		fmt.Fprintf(&valid, `{"role":"user","run":"r%d","content":"message %d"}`+"\n", i%7, i)
	}
	for _, bad := range []string{`{"role":"user","content":"x"`, `{"a":1} {}`, "{\"content\":\"\x01\"}", `{"content":"\u12"}`, `{"n":01}`,
		`{"a":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`, `[{"role":"user"}]`, `null`, "\xef\xbb\xbf{}"} {
		for _, log := range []string{"messages.jsonl", "events.jsonl"} {
			msgs, events := valid.String()+bad+"\n", valid.String()
			if log == "events.jsonl" {
				msgs, events = events, msgs
			}
			err := Export(io.Discard, strings.NewReader(msgs), strings.NewReader(events), testInfo)
			want := fmt.Sprintf("%s line %d: not a JSON object", log, good+1)
			if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), want) {
				t.Errorf("%.40q in %s: err %v, want EIO, %s", bad, log, err, want)
			}
		}
	}
}

// TestPartsReadAllRawFields: a part with every member proto.RawFields
// names (its JSON names, as encoding/json derives them) is read as
// Part.UnmarshalJSON reads it: lineFields and partOf know every member a
// part is read by, even one added to proto later.
func TestPartsReadAllRawFields(t *testing.T) {
	var obj []string
	rt := reflect.TypeOf(proto.RawFields{})
	for i := range rt.NumField() {
		f := rt.Field(i)
		name := f.Name
		if tag := f.Tag.Get("json"); tag != "" {
			name = tag
		}
		obj = append(obj, fmt.Sprintf(`"%s":"v%d"`, name, i))
	}
	elem := []byte("{" + strings.Join(obj, ",") + `,"is_error":true}`)
	var want proto.Part
	if err := json.Unmarshal(elem, &want); err != nil {
		t.Fatal(err)
	}
	var w members
	if got := partOf(elem, &w); !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got %#v\nwant %#v", elem, got, want)
	}
}
