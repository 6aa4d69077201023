package provider

import (
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// readAll reads every event of input and the error that ended the stream.
func readAll(r io.Reader, max int) ([]sseEvent, error) {
	s := newSSEReader(r, max)
	var evs []sseEvent
	for {
		ev, err := s.next()
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}

func TestSSE(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in string
		want     []sseEvent
		err      error
	}{
		{"space or not", "data: a\n\ndata:b\n\ndata:  c\n\n",
			[]sseEvent{{Data: "a"}, {Data: "b"}, {Data: " c"}}, io.EOF},
		{"multi-line data", "data: one\ndata: two\ndata:\n\n",
			[]sseEvent{{Data: "one\ntwo\n"}}, io.EOF},
		{"event names reset per event", "event: ping\ndata: {}\n\ndata: x\n\n",
			[]sseEvent{{Name: "ping", Data: "{}"}, {Data: "x"}}, io.EOF},
		{"comments and unknown fields", ": keep-alive\nid: 7\nretry: 10\nfoo\ndata: x\n\n",
			[]sseEvent{{Data: "x"}}, io.EOF},
		{"CRLF", "event: e\r\ndata: a\r\n\r\ndata: b\r\n\r\n",
			[]sseEvent{{Name: "e", Data: "a"}, {Data: "b"}}, io.EOF},
		{"lone CR", "data: a\r\rdata: b\r\r",
			[]sseEvent{{Data: "a"}, {Data: "b"}}, io.EOF},
		{"no data, no event", "event: lonely\n\n: comment\n\n\n\n", nil, io.EOF},
		{"empty data is an event", "data\n\n", []sseEvent{{Data: ""}}, io.EOF},
		{"BOM", "\xEF\xBB\xBFdata: a\n\n", []sseEvent{{Data: "a"}}, io.EOF},
		{"last event without blank line", "data: a\n\ndata: b\n", []sseEvent{{Data: "a"}, {Data: "b"}}, io.EOF},
		{"cut inside a line", "data: a\n\ndata: {\"half", []sseEvent{{Data: "a"}}, errCutLine},
		{"cut after a line of a new event", "data: a\n\ndata: b\ndata: c", []sseEvent{{Data: "a"}}, errCutLine},
		{"colon in value", "data: a:b\n\n", []sseEvent{{Data: "a:b"}}, io.EOF},
	}
	for _, c := range cases {
		for _, slow := range []bool{false, true} {
			var r io.Reader = strings.NewReader(c.in)
			if slow {
				r = iotest.OneByteReader(r) // a CR and its LF arrive apart
			}
			got, err := readAll(r, 1<<10)
			if !reflect.DeepEqual(got, c.want) || err != c.err {
				t.Errorf("%s (one byte at a time: %v): %q, %v; want %q, %v", c.name, slow, got, err, c.want, c.err)
			}
		}
	}
}

func TestSSELimits(t *testing.T) {
	t.Parallel()
	const max = 64
	for name, in := range map[string]string{
		"long line":            "data: " + strings.Repeat("x", max) + "\n\n",
		"long line, no end":    strings.Repeat("x", 10*max),
		"long comment":         ":" + strings.Repeat("x", max+1) + "\n",
		"long event in pieces": strings.Repeat("data: "+strings.Repeat("x", max/4)+"\n", 5) + "\n",
	} {
		if _, err := readAll(strings.NewReader(in), max); err != errLineTooLong {
			t.Errorf("%s: %v, want errLineTooLong", name, err)
		}
	}
	ok := "data: " + strings.Repeat("x", max-len("data: ")) + "\r\n\r\n"
	if evs, err := readAll(strings.NewReader(ok), max); len(evs) != 1 || err != io.EOF {
		t.Errorf("a line of exactly %d bytes: %d events, %v", max, len(evs), err)
	}
}

// A read error is passed on as it is.
func TestSSEReadError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader("data: a\n\n"), iotest.ErrReader(boom))
	evs, err := readAll(r, 1<<10)
	if len(evs) != 1 || err != boom {
		t.Errorf("%q, %v", evs, err)
	}
}

// FuzzSSE checks that the parser never panics, stays within its bounds,
// reads the same events however the input is split into reads, and
// treats every line end alike.
func FuzzSSE(f *testing.F) {
	for _, s := range []string{
		"data: a\n\n", "event: x\r\ndata: {}\r\n\r\n", "data: a\rdata: b\r\r", ":c\n\ndata\n\n",
		"\xEF\xBB\xBFdata: x\n", "data: a\n\ndata: {\"half", "data:" + strings.Repeat("y", 300) + "\n\n",
	} {
		f.Add([]byte(s))
	}
	const max = 256
	f.Fuzz(func(t *testing.T, in []byte) {
		evs, err := readAll(strings.NewReader(string(in)), max)
		if err != io.EOF && err != errCutLine && err != errLineTooLong {
			t.Fatalf("unexpected error %v", err)
		}
		if len(evs) > len(in)/2+1 {
			t.Fatalf("%d events from %d bytes", len(evs), len(in))
		}
		for _, ev := range evs {
			if len(ev.Data) > max || len(ev.Name) > max {
				t.Fatalf("event over the limit: %d, %d bytes", len(ev.Name), len(ev.Data))
			}
			if strings.ContainsAny(ev.Name, "\r\n") || strings.Contains(ev.Data, "\r") {
				t.Fatalf("line end inside an event: %q", ev)
			}
		}
		slow, slowErr := readAll(iotest.OneByteReader(strings.NewReader(string(in))), max)
		if !reflect.DeepEqual(evs, slow) || err != slowErr {
			t.Fatalf("split reads differ: %q %v vs %q %v", evs, err, slow, slowErr)
		}
		if err == errLineTooLong {
			return // where a limit strikes depends on the line ends' lengths
		}
		lf := strings.ReplaceAll(strings.ReplaceAll(string(in), "\r\n", "\n"), "\r", "\n")
		lfEvs, lfErr := readAll(strings.NewReader(lf), max)
		if !reflect.DeepEqual(evs, lfEvs) || err != lfErr {
			t.Fatalf("line ends matter: %q %v vs %q %v", evs, err, lfEvs, lfErr)
		}
	})
}
