package versions

import (
	"reflect"
	"testing"
)

// TestChoose: a version alone; a run's files each at their first change
// in it; a path keeps one file; nothing matching is nothing.
func TestChoose(t *testing.T) {
	es := []Entry{
		{V: 1, Run: "r1", Path: "/a"}, {V: 2, Run: "r1", Path: "/a"}, {V: 3, Run: "r1", Path: "/b"},
		{V: 4, Run: "r2", Path: "/a"},
	}
	vs := func(got []Entry) []int {
		var out []int
		for _, e := range got {
			out = append(out, e.V)
		}
		return out
	}
	for _, c := range []struct {
		sel  Selector
		want []int
		what string
	}{
		{Selector{Version: 2}, []int{2}, "restore version 2"},
		{Selector{Run: "r1"}, []int{1, 3}, "restore the files run r1 changed, as they were before it"},
		{Selector{Run: "r1", Path: "/b"}, []int{3}, "restore the files run r1 changed, as they were before it: /b"},
		{Selector{Version: 4, Path: "/b"}, nil, "restore version 4: /b"},
		{Selector{Run: "r9"}, nil, "restore the files run r9 changed, as they were before it"},
	} {
		got, what := Choose(es, c.sel)
		if !reflect.DeepEqual(vs(got), c.want) || what != c.what {
			t.Errorf("%+v: %v %q, want %v %q", c.sel, vs(got), what, c.want, c.what)
		}
	}
}
