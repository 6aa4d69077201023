package proto

import (
	"encoding/json"
	"reflect"
	"testing"
)

// wireCases are request lines of every kind of member: each type, null,
// repeated keys, keys in other cases, escapes, wrong types, unknown
// members.
var wireCases = []string{
	`{"op":"send","id":"w1","session":"s","input":"hi","cwd":"/x"}`,
	`{"op":"send","OP":"cancel","Id":"a\u00e9\n","session":null,"scope":"space","space":"team"}`,
	`{"op":"archive","delete":true,"dry_run":false,"after":"r"}`,
	`{"op":"archive","delete":true,"archived":true,"uid":1001}`,
	`{"op":"archive","archived":true,"uid":4294967295}`,
	`{"op":"archive","archived":true,"uid":4294967296}`,
	`{"op":"archive","archived":"true","uid":-1}`,
	`{"op":"archive","archived":null,"uid":1.0}`,
	`{"op":"archive","uid":"1001"}`,
	`{"op":"restore","version":12,"path":"a/b","run":"ctx-1"}`,
	`{"op":"restore","version":-9223372036854775808}`,
	`{"op":"restore","version":9223372036854775808}`,
	`{"op":"restore","version":1.0}`,
	`{"op":"restore","version":1e3}`,
	`{"op":"restore","version":"1"}`,
	`{"op":"approve","decision":"allow","reason":"ok","text":"t"}`,
	`{"op":"archivable","sessions":["a","b",null]}`,
	`{"op":"archivable","sessions":[]}`,
	`{"op":"archivable","sessions":["a",1]}`,
	`{"op":"archivable","sessions":{"a":1}}`,
	`{"op":"archivable","sessions":null,"sessions":["x"]}`,
	`{"op":"send","input":"x","input":null}`,
	`{"op":5}`,
	`{"op":"send","delete":"yes"}`,
	`{"op":"send","delete":1}`,
	`{"op":"search","query":"\ud800 and \udc00\ud800\udc00"}`,
	`{"unknown":{"deep":[1,2,{"x":null}]},"op":"ping"}`,
	`{"ſession":"long s","ſcope":"K"}`,
	`{}`,
}

// unmarshalWire is the wire shape as json.Unmarshal reads it: what
// decodeWire must give.
func unmarshalWire(line []byte) (wireRequest, error) {
	var w wireRequest
	err := json.Unmarshal(line, &w)
	return w, err
}

// sameWire fails unless decodeWire reads line as json.Unmarshal does: the
// same members, or both an error.
func sameWire(t *testing.T, line []byte) {
	t.Helper()
	var probe map[string]json.RawMessage
	if json.Unmarshal(line, &probe) != nil || probe == nil {
		return // not an object: ParseRequest's CheckLogLine refuses it first
	}
	got, gotErr := decodeWire(line)
	want, wantErr := unmarshalWire(line)
	if (gotErr == nil) != (wantErr == nil) || gotErr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\ndecodeWire %+v (%v)\njson.Unmarshal %+v (%v)", line, got, gotErr, want, wantErr)
	}
}

// TestDecodeWireAsUnmarshal: every case reads as json.Unmarshal reads it.
func TestDecodeWireAsUnmarshal(t *testing.T) {
	for _, c := range wireCases {
		sameWire(t, []byte(c))
	}
	for _, c := range requestCases {
		sameWire(t, []byte(c.line))
	}
}

// FuzzDecodeWire: any object reads as json.Unmarshal reads it.
func FuzzDecodeWire(f *testing.F) {
	for _, c := range wireCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, line []byte) { sameWire(t, line) })
}

// BenchmarkParseRequest: a send line of about 200 bytes.
func BenchmarkParseRequest(b *testing.B) {
	line := []byte(`{"op":"send","id":"w12","session":"bench3","input":"a line of two hundred bytes or so, as the durable sends benchmark writes, with some words in it to make it long enough to be typical","cwd":"/home/u"}` + "\n")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseRequest(line); err != nil {
			b.Fatal(err)
		}
	}
}
