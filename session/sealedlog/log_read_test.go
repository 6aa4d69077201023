package sealedlog

import (
	"bytes"
	"testing"
)

// TestTail: the tail starts at the first whole line within the bound (a
// line the bound cuts is left out), at its offset in the log; a bound past
// the log's size gives the whole log from 0; a bound inside the last line
// gives nothing, at the log's end; one byte short of the whole log
// leaves out the first line.
func TestTail(t *testing.T) {
	l, _, _ := mustCreate(t)
	var all []byte
	for i := range 5 {
		mustAppend(t, l, line(i))
		all = append(all, line(i)...)
	}
	last := int64(len(line(4)))
	for _, c := range []struct {
		max     int64
		wantOff int64
	}{
		{int64(len(all)) + 10, 0},
		{int64(len(all)), 0},
		{last + 1, int64(len(all)) - last},
		{last, int64(len(all)) - last},
		{last - 1, int64(len(all))},
		{int64(len(all)) - 1, int64(len(line(0)))},
	} {
		got, off := l.Tail(c.max)
		if off != c.wantOff || !bytes.Equal(got, all[c.wantOff:]) {
			t.Errorf("Tail(%d) = %q at %d, want %q at %d", c.max, got, off, all[c.wantOff:], c.wantOff)
		}
	}
}
