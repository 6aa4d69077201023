package abi

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"
)

var lineCases = []struct {
	line string
	ok   bool
}{
	{`{}`, true},
	{`{"role":"user","content":"hi"}`, true},
	{` {"a":1} `, true},
	{"{\"a\":1}\r", true},
	{`{"a":"\u0000"}`, true},
	{`{"中文":"你好"}`, true},
	{``, false},
	{` `, false},
	{`[]`, false},
	{`"x"`, false},
	{`1`, false},
	{`null`, false},
	{`{`, false},
	{`{"a":1}{"b":2}`, false},
	{`{"a":1} x`, false},
	{`{"a":1}` + "\n" + `{"b":2}`, false},
	{"{\"a\":\"\xff\"}", false},
	{"{\"a\":\"\xed\xa0\x80\"}", false}, // UTF-16 surrogate encoded as UTF-8
	{`{"a":1,}`, false},
}

func TestCheckLogLine(t *testing.T) {
	for _, c := range lineCases {
		err := CheckLogLine([]byte(c.line))
		if (err == nil) != c.ok {
			t.Errorf("CheckLogLine(%q) = %v, want ok=%v", c.line, err, c.ok)
		}
		if err != nil && Errno(err) != syscall.EINVAL {
			t.Errorf("CheckLogLine(%q) errno = %v, want EINVAL", c.line, Errno(err))
		}
	}
}

func TestCheckLogLineSize(t *testing.T) {
	pad := MaxLineBytes - len(`{"a":""}`)
	exact := `{"a":"` + strings.Repeat("x", pad) + `"}`
	if err := CheckLogLine([]byte(exact)); err != nil {
		t.Fatalf("line of exactly %d bytes refused: %v", len(exact), err)
	}
	over := `{"a":"` + strings.Repeat("x", pad+1) + `"}`
	if err := CheckLogLine([]byte(over)); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("line of %d bytes: %v, want EINVAL", len(over), err)
	}
}

// FuzzCheckLogLine checks the validator against the definition it enforces:
// accepted lines are valid UTF-8, newline-free, within the limit, and decode
// as exactly one JSON object.
func FuzzCheckLogLine(f *testing.F) {
	for _, c := range lineCases {
		f.Add([]byte(c.line))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		err := CheckLogLine(line)
		trimmed := bytes.TrimLeft(line, " \t\r")
		want := utf8.Valid(line) && bytes.IndexByte(line, '\n') < 0 && len(line) <= MaxLineBytes &&
			json.Valid(line) && len(trimmed) > 0 && trimmed[0] == '{'
		if (err == nil) != want {
			t.Fatalf("%q: %v, want ok=%v (json.Valid and the line rules)", line, err, want)
		}
		if err != nil {
			if Errno(err) != syscall.EINVAL {
				t.Fatalf("errno %v, want EINVAL", Errno(err))
			}
			return
		}
		if !utf8.Valid(line) || bytes.IndexByte(line, '\n') >= 0 || len(line) > MaxLineBytes {
			t.Fatalf("accepted %q", line)
		}
		var obj map[string]json.RawMessage
		dec := json.NewDecoder(bytes.NewReader(line))
		if err := dec.Decode(&obj); err != nil || obj == nil {
			t.Fatalf("accepted %q that does not decode as an object: %v", line, err)
		}
		if dec.More() {
			t.Fatalf("accepted %q with trailing data", line)
		}
	})
}

// BenchmarkCheckLogLine: a message line of about 300 bytes, as a send
// appends several of.
func BenchmarkCheckLogLine(b *testing.B) {
	line := []byte(`{"run":"ctx-0000000000000000000000000000002a","ts":"2026-12-03T01:00:00.000Z","role":"user","content":[{"type":"text","text":"a line of two hundred bytes or so, as the durable sends benchmark writes, with some words in it, \u00e9 and \"quotes\""}]}`)
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if err := CheckLogLine(line); err != nil {
			b.Fatal(err)
		}
	}
}

// Clip cuts on character boundaries only, and says when it cut.
func TestClip(t *testing.T) {
	for _, c := range []struct {
		s    string
		max  int
		want string
	}{
		{"abc", 3, "abc"},
		{"abcd", 3, "abc…"},
		{"ab日本", 4, "ab…"}, // 日 is 3 bytes: it does not fit in 4
		{"ab日本", 5, "ab日…"},
		{"日本", 0, "…"},
		{"", 0, ""},
	} {
		if got := Clip(c.s, c.max); got != c.want {
			t.Errorf("Clip(%q, %d) = %q, want %q", c.s, c.max, got, c.want)
		}
	}
}
