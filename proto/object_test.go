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
