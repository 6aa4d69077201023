package proto

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
)

// TestSetAsMarshal: Set writes each kind it knows byte for byte as
// encoding/json.Marshal writes it, the HTML escapes of strings and of
// objects' lines included.
func TestSetAsMarshal(t *testing.T) {
	inner := NewObject("type", "text", "text", "a <b> & c")
	plainInner := NewObject("type", "text", "text", "line\n\"two\"\u2028é", "n", 3)
	values := []any{
		"", "plain", "tab\there", "quote\"back\\slash", "<tag>", "a&b", "bell\a", "\u2028\u2029",
		"é ü 中文 🙂", string([]byte{0xff, 'a', 0xc3}), "\x00\x1f\x7f",
		true, false,
		0, -1, 42, math.MaxInt64, math.MinInt64, int64(-7), int64(math.MinInt64), uint64(0), uint64(math.MaxUint64),
		json.RawMessage(`{"a":1}`),
		inner, plainInner, (*Object)(nil), NewObject(),
		[]*Object{plainInner, NewObject("k", 1)}, []*Object{plainInner, inner}, []*Object{}, []*Object(nil), []*Object{nil, plainInner},
	}
	for _, v := range values {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		o := NewObject("k", v)
		if got := o.Raw("k"); !bytes.Equal(got, want) {
			t.Errorf("Set(%#v) = %s, json.Marshal %s", v, got, want)
		}
		wantLine, _ := json.Marshal(map[string]json.RawMessage{"k": want})
		if got := o.Line(); !bytes.Equal(got, append(wantLine, '\n')) {
			t.Errorf("Line of %#v = %q, want %q", v, got, wantLine)
		}
	}
}

// FuzzSetString holds Set of any string, and of an object and a list
// holding it, to encoding/json.Marshal.
func FuzzSetString(f *testing.F) {
	for _, s := range []string{"", "plain", "a\nb", "<&>", "\u2028", "\xff\xfe", "é\"\\"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		inner := NewObject("text", s)
		for _, v := range []any{s, inner, []*Object{inner, inner}} {
			want, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			if got := NewObject("k", v).Raw("k"); !bytes.Equal(got, want) {
				t.Fatalf("Set(%#v) = %s, json.Marshal %s", v, got, want)
			}
		}
	})
}

// BenchmarkStartRecord is the making of a line like a run's start record.
func BenchmarkStartRecord(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		o := NewObject("type", "run_start", "run", "r0123456789", "session", "s1-2", "uid", 1000, "ts", "2026-12-03T05:36:33.123456789Z",
			"parts", []*Object{NewObject("type", "text", "text", "hello\nworld")}, "resumed", false)
		_ = o.Line()
	}
}

// TestPlainWords: plain's word at a time says what its byte at a time
// says, for every byte in every place of a word.
func TestPlainWords(t *testing.T) {
	byteWise := func(s string) bool {
		for i := 0; i < len(s); i++ {
			switch c := s[i]; {
			case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
				return false
			}
		}
		return true
	}
	for c := 0; c < 256; c++ {
		for at := 0; at < 9; at++ {
			b := []byte("abcdefghi")
			b[at] = byte(c)
			if got, want := plain(b), byteWise(string(b)); got != want {
				t.Fatalf("plain(%q) = %v, want %v", b, got, want)
			}
			if got, want := plain(string(b[:8])), byteWise(string(b[:8])); got != want {
				t.Fatalf("plain(%q) = %v, want %v", b[:8], got, want)
			}
		}
	}
}
