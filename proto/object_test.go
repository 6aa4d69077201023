package proto

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
)

// TestLineFollowsChanges: Line keeps what it made until the object
// changes (Set, Delete); what it returns cannot be changed by appending
// to it; readers on several goroutines share one line.
func TestLineFollowsChanges(t *testing.T) {
	o := NewObject("type", "start", "run", "r1")
	if got := string(o.Line()); got != `{"type":"start","run":"r1"}`+"\n" {
		t.Fatalf("line %q", got)
	}
	o.Set("run", "r2")
	if got := string(o.Line()); got != `{"type":"start","run":"r2"}`+"\n" {
		t.Fatalf("after Set of a member: %q", got)
	}
	o.Set("ts", "t")
	if got := string(o.Line()); got != `{"type":"start","run":"r2","ts":"t"}`+"\n" {
		t.Fatalf("after Set of a new member: %q", got)
	}
	o.Delete("run")
	if got := string(o.Line()); got != `{"type":"start","ts":"t"}`+"\n" {
		t.Fatalf("after Delete: %q", got)
	}
	l := o.Line()
	_ = append(l, "more"...)
	if got := string(o.Line()); got != `{"type":"start","ts":"t"}`+"\n" {
		t.Fatalf("after an append to a returned line: %q", got)
	}
	nested, err := json.Marshal(NewObject("content", []*Object{o}))
	if err != nil || string(nested) != `{"content":[{"type":"start","ts":"t"}]}` {
		t.Fatalf("nested: %s %v", nested, err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := string(NewObject("a", 1).Line()); got != `{"a":1}`+"\n" {
				t.Errorf("concurrent: %q", got)
			}
			if got := string(o.Line()); got != `{"type":"start","ts":"t"}`+"\n" {
				t.Errorf("shared: %q", got)
			}
		}()
	}
	wg.Wait()
}

// The plain-string shortcuts write and read the same bytes encoding/json
// does, for plain strings and for every kind of string that is not.
func TestPlainStringsAsEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "done", "ctx-0123abcd", "2026-12-01T15:00:00.123Z", "a b/c:d",
		"quote\"d", `back\slash`, "<tag>", "a&b", "tab\there", "new\nline", "\x7f", "é", "日本", "\u2028", "\x00"} {
		o := NewObject("k", s)
		want, _ := json.Marshal(map[string]string{"k": s})
		if got := string(o.Line()); got != string(want)+"\n" {
			t.Errorf("Line of %q = %q, want %q", s, got, want)
		}
		p, err := ParseObject(o.Line()[:len(o.Line())-1], true)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := p.String("k"); !ok || got != s {
			t.Errorf("String of %q = %q, %v", s, got, ok)
		}
	}
	// A value that is not a string is not read as one.
	for _, raw := range []string{`1`, `{"a":"b"}`, `["x"]`, `"x" `} {
		o := &Object{Fields: []Field{{"k", json.RawMessage(raw)}}}
		if s, ok := o.String("k"); ok && raw != `"x" ` {
			t.Errorf("String of %s = %q, true", raw, s)
		}
	}
}

// parseObjectDecoder is ParseObject as it was, with a json.Decoder: the
// reference ParseObject must agree with.
func parseObjectDecoder(data []byte, strict bool) (*Object, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	o := &Object{}
	seen := map[string]int{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		if i, dup := seen[key]; dup {
			if strict {
				return nil, errors.New("duplicate key")
			}
			o.Fields[i].Value = raw
			continue
		}
		seen[key] = len(o.Fields)
		o.Fields = append(o.Fields, Field{key, raw})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("trailing data")
	}
	return o, nil
}

// FuzzParseObject: ParseObject reads what the json.Decoder it replaced
// read, member for member, and refuses what it refused; it also refuses
// anything but white space after the object, which the decoder let
// through when it was no JSON token ({"a":1}x).
func FuzzParseObject(f *testing.F) {
	for _, s := range []string{`{"type":"match","session":"s","text":"a\u00e9\"b"}`, ` {"a":1,"a":2} `, `{"a":{"b":[1,2,{"c":null}]}}`,
		`{"a":1}x`, `{"a":1} 5`, `{"a":1,}`, `[]`, ``, `{"\ud800":1,"k\u0065y":"v"}`, "{\"\xff\":\"\xfe\"}", `{"a":01}`} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, strict bool) {
		got, err := ParseObject(data, strict)
		want, werr := parseObjectDecoder(data, strict)
		if err != nil {
			if werr == nil && json.Valid(data) {
				t.Fatalf("%q: refused (%v), the decoder read %v", data, err, want.Fields)
			}
			return
		}
		if werr != nil {
			t.Fatalf("%q: read %v, the decoder refused it (%v)", data, got.Fields, werr)
		}
		if len(got.Fields) != len(want.Fields) {
			t.Fatalf("%q: %d members, the decoder %d", data, len(got.Fields), len(want.Fields))
		}
		for i := range got.Fields {
			if got.Fields[i].Key != want.Fields[i].Key || !bytes.Equal(got.Fields[i].Value, want.Fields[i].Value) {
				t.Fatalf("%q: member %d %q=%s, the decoder %q=%s", data, i, got.Fields[i].Key, got.Fields[i].Value, want.Fields[i].Key, want.Fields[i].Value)
			}
		}
	})
}

// BenchmarkParseObject: a match frame as a search reply carries a
// thousand of.
func BenchmarkParseObject(b *testing.B) {
	line := []byte(`{"type":"match","session":"c0002","run":"ctx-000000000000000000000000000001a4","role":"user","ts":"2026-01-01T00:00:00.000Z","text":"…ka lo the system of pre ble tion ment and the file index session agent log ing ly al con ter us or in el an po ri ta su ne mi lo ka…"}`)
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if _, err := ParseObject(line, false); err != nil {
			b.Fatal(err)
		}
	}
}

// TestParseObjectManyMembers: past the members a scan finds (16), keys
// are found again by a map: the last of duplicates still wins, and strict
// still refuses them, as the decoder did.
func TestParseObjectManyMembers(t *testing.T) {
	var b bytes.Buffer
	b.WriteString("{")
	for i := range 40 {
		fmt.Fprintf(&b, `"k%d":%d,`, i%25, i)
	}
	b.WriteString(`"last":true}`)
	got, err := ParseObject(b.Bytes(), false)
	want, werr := parseObjectDecoder(b.Bytes(), false)
	if err != nil || werr != nil || len(got.Fields) != 26 || len(got.Fields) != len(want.Fields) {
		t.Fatalf("%d members (%v), the decoder %d (%v)", len(got.Fields), err, len(want.Fields), werr)
	}
	for i := range got.Fields {
		if got.Fields[i].Key != want.Fields[i].Key || !bytes.Equal(got.Fields[i].Value, want.Fields[i].Value) {
			t.Fatalf("member %d: %q=%s, the decoder %q=%s", i, got.Fields[i].Key, got.Fields[i].Value, want.Fields[i].Key, want.Fields[i].Value)
		}
	}
	if _, err := ParseObject(b.Bytes(), true); err == nil || !strings.Contains(err.Error(), `duplicate key "k0"`) {
		t.Fatalf("strict: %v, want the duplicate k0", err)
	}
}

// TestParseObjectTrailing: anything but white space after the object is
// EINVAL (the decoder it replaced let `{"a":1}x` through); white space is
// not.
func TestParseObjectTrailing(t *testing.T) {
	for _, line := range []string{`{"a":1}x`, `{"a":1} {}`, `{"a":1}]`, `{"a":1}` + "\x00", `{"a":1}"`} {
		if o, err := ParseObject([]byte(line), false); abi.Errno(err) != syscall.EINVAL {
			t.Errorf("%q: %v, %v; want EINVAL", line, o, err)
		}
	}
	if o, err := ParseObject([]byte(" {\"a\":1} \t\r\n"), true); err != nil || len(o.Fields) != 1 || string(o.Fields[0].Value) != "1" {
		t.Fatalf("white space around: %v, %v", o, err)
	}
}
