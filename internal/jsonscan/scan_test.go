package jsonscan

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// probe is what encoding/json reads of an object into RawMessage fields
// named as probeFields names them: the reference Object must agree with.
type probe struct {
	Type, TS, Kind json.RawMessage
	ToolCallID     json.RawMessage `json:"tool_call_id"`
}

var probeFields = NewFields("Type", "TS", "Kind", "tool_call_id")

// hostile are lines a log may hold after damage or through the mount:
// each scanner path, and each way a line can fail to be JSON.
var hostile = []string{
	`{}`, ` {} `, "\t{\"type\":1}\r\n", `{"type":"x","ts":"t","kind":[1,{"a":null}],"tool_call_id":"c"}`,
	`{"Type":1,"type":2,"TYPE":3}`, `{"tYpE":"mixed","Ts":"", "KIND" : true}`, `{"tool_call_id":1,"TOOL_CALL_ID":2,"toolcallid":3}`,
	`{"t\u0079pe":"escaped key"}`, `{"tſ":"long s folds to s"}`, `{"\u212aind":"kelvin folds to k"}`, "{\"K\xe2\x84\xaaind\":1}",
	"{\"t\xffpe\":1}", "{\"type\":\"\xff\xfe\"}", `{"type":"\ud800"}`, `{"ty\u0000pe":1}`,
	`{"type":"a\/b\"\\\b\f\n\r\t\u00e9"}`, `{"type":"\x"}`, `{"type":"\u12"}`, `{"type":"\u12g4"}`, "{\"type\":\"a\x01b\"}", "{\"type\":\"a\x7fb\"}",
	`{"type":-0}`, `{"type":01}`, `{"type":-}`, `{"type":1.}`, `{"type":1.5e}`, `{"type":1e+}`, `{"type":1E-7}`, `{"type":-12.5e+30}`, `{"type":+1}`, `{"type":.5}`,
	`{"type":tru}`, `{"type":truex}`, `{"type":nul}`, `{"type":false}`, `{"type":null}`,
	`{"type":1,}`, `{,}`, `{"type"}`, `{"type":}`, `{"type" 1}`, `{"type":1 "ts":2}`, `{"type":1}}`, `{"type":1}{}`, `{"type":1} x`, `{"type":[1,]}`, `{"type":[,1]}`, `{"type":[1 2]}`,
	`{1:2}`, `{'type':1}`, `{"type":1`, `{"type":"abc`, `{"type":[`, `{`, ``, ` `, `null`, ` null `, `[]`, `[1,"a",{"type":1},null,[2]]`, `[1,]`, `[`, `"s"`, `1`, `true`,
	"{\"type\":1}\v", "\xef\xbb\xbf{}", "{\"type\":1}\x00",
}

func TestObjectHostile(t *testing.T) {
	for _, line := range hostile {
		checkObject(t, []byte(line))
		checkElements(t, []byte(line))
	}
}

func TestNesting(t *testing.T) {
	for _, n := range []int{maxDepth - 1, maxDepth, maxDepth + 1} {
		arr := strings.Repeat("[", n-1) + strings.Repeat("]", n-1)
		checkObject(t, []byte(`{"type":`+arr+`}`))
		checkElements(t, []byte("["+arr+"]"))
		obj := strings.Repeat(`{"a":`, n-1) + "1" + strings.Repeat("}", n-1)
		checkObject(t, []byte(`{"kind":`+obj+`}`))
	}
}

func FuzzObject(f *testing.F) {
	for _, line := range hostile {
		f.Add([]byte(line))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkObject(t, b)
		checkElements(t, b)
		checkCompact(t, b)
		checkString(t, string(b))
	})
}

// checkObject: Object agrees with json.Unmarshal on b.
func checkObject(t *testing.T, b []byte) {
	t.Helper()
	var p probe
	want := json.Unmarshal(b, &p) == nil && string(bytes.TrimSpace(b)) != "null"
	vals := make([][]byte, probeFields.Len())
	if got := probeFields.Object(b, vals); got != want {
		t.Fatalf("%q: Object says %v, json.Unmarshal %v", b, got, want)
	}
	if !want {
		return
	}
	for i, w := range [][]byte{p.Type, p.TS, p.Kind, p.ToolCallID} {
		if (vals[i] == nil) != (w == nil) || !bytes.Equal(vals[i], w) {
			t.Fatalf("%q: member %d is %q, json.Unmarshal reads %q", b, i, vals[i], w)
		}
	}
}

// checkElements: Elements agrees with json.Unmarshal into raw elements.
func checkElements(t *testing.T, b []byte) {
	t.Helper()
	var raws []json.RawMessage
	want := json.Unmarshal(b, &raws) == nil && string(bytes.TrimSpace(b)) != "null"
	var got [][]byte
	if ok := Elements(b, func(e []byte) { got = append(got, e) }); ok != want {
		t.Fatalf("%q: Elements says %v, json.Unmarshal %v", b, ok, want)
	}
	if !want {
		return
	}
	if len(got) != len(raws) {
		t.Fatalf("%q: %d elements, json.Unmarshal reads %d", b, len(got), len(raws))
	}
	for i := range got {
		if !bytes.Equal(got[i], raws[i]) {
			t.Fatalf("%q: element %d is %q, json.Unmarshal reads %q", b, i, got[i], raws[i])
		}
	}
}

func TestNamesFoldingAlikeRefused(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("NewFields took two names that fold alike")
		}
	}()
	NewFields("TS", "ts")
}

// TestAppendCompact: AppendCompact agrees with json.Compact on every
// hostile text, and with json.Marshal of a RawMessage on the valid ones.
func TestAppendCompact(t *testing.T) {
	for _, line := range append(hostile, ` [ 1 , { "a b" : "c\" d" , "e":[ ] } ] `, "\"x\\\\\" y\"", " 12 ") {
		checkCompact(t, []byte(line))
	}
}

func checkCompact(t *testing.T, b []byte) {
	t.Helper()
	var want bytes.Buffer
	werr := json.Compact(&want, b)
	got, ok := AppendCompact([]byte("prefix"), b)
	if ok != (werr == nil) {
		t.Fatalf("%q: AppendCompact says %v, json.Compact %v", b, ok, werr)
	}
	if !ok {
		if string(got) != "prefix" {
			t.Fatalf("%q: AppendCompact failed but appended %q", b, got)
		}
		return
	}
	if string(got) != "prefix"+want.String() {
		t.Fatalf("%q: AppendCompact %q, json.Compact %q", b, got, want.String())
	}
}

// TestStringsEightAtATime: a quote, a backslash, a control character or
// a byte of each other kind at every offset of a long string is read as
// encoding/json reads it.
func TestStringsEightAtATime(t *testing.T) {
	for _, odd := range []string{`"`, `\`, `\\`, `\"`, `\u00e9`, `\x`, "\x00", "\x1f", "\x20", "\x7f", "\x80", "\xff", "é", "\x21", "\x5b", "\x5d"} {
		for at := 0; at < 20; at++ {
			text := strings.Repeat("a", at) + odd + strings.Repeat("b", 19-at)
			checkObject(t, []byte(`{"type":"`+text+`","ts":"`+text+`"}`))
			checkElements(t, []byte(`["`+text+`"]`))
		}
	}
}

// TestAppendString: every kind of byte and rune at every offset of a
// long string is quoted as encoding/json quotes it without HTML escapes.
func TestAppendString(t *testing.T) {
	for _, odd := range []string{`"`, `\`, "\x00", "\b", "\f", "\n", "\r", "\t", "\x1f", "\x7f", "<&>", "é", "中", "😀", "\u2028", "\u2029", "\xff", "\xe2\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80"} {
		for at := 0; at < 20; at++ {
			checkString(t, strings.Repeat("a", at)+odd+strings.Repeat("b", 19-at))
		}
		checkString(t, odd)
	}
	checkString(t, "")
}

func checkString(t *testing.T, s string) {
	t.Helper()
	var want bytes.Buffer
	enc := json.NewEncoder(&want)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	if got := AppendString([]byte("x"), s); string(got) != "x"+strings.TrimSuffix(want.String(), "\n") {
		t.Fatalf("%q: AppendString %s, encoding/json %s", s, got[1:], want.String())
	}
}
