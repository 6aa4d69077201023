package proto

import (
	"encoding/json"
	"sync"
	"testing"
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
