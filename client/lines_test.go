package client

import (
	"context"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/proto"
)

// A line of exactly the bound is read whole, with "\n" or "\r\n" and at
// the end without either, wherever the reader's buffer cuts it; one byte
// more is long, and the lines around it are read as they were.
func TestLineReaderBound(t *testing.T) {
	for _, max := range []int{1, 100, 64<<10 - 1, 64 << 10, 64<<10 + 1, 200 << 10} {
		for _, end := range []string{"\n", "\r\n", ""} {
			exact, over := strings.Repeat("x", max), strings.Repeat("y", max+1)
			in := "a\n" + over + end
			if end != "" {
				in += exact + end + "b"
			}
			lr := NewLineReader(strings.NewReader(in), max)
			var got []string
			for {
				line, long, err := lr.Next()
				switch {
				case long:
					got = append(got, "LONG")
				case len(line) > 0:
					got = append(got, string(line))
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			want := []string{"a", "LONG"}
			if end != "" {
				want = append(want, exact, "b")
			}
			if strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("max %d end %q: got %d lines %.40q, want %d", max, end, len(got), got, len(want))
			}
		}
	}
}

// A reply stream that never ends its line, as a hostile or broken server
// could send, costs the reader at most MaxFrameBytes: the line is dropped
// as it arrives, reported as ErrFrameTooLong, and the frames after it are
// read.
func TestFrameReaderBoundsAServersLine(t *testing.T) {
	sock, ln := listen(t)
	const sent = 8 * MaxFrameBytes
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		chunk := []byte(`{"type":"delta","text":"` + strings.Repeat("z", 64<<10-30))
		for n := 0; n < sent; n += len(chunk) {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
		io.WriteString(c, "\"}\n{\"type\":\"done\"}\n")
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	f, err := c.Next()
	if err != nil || !errors.Is(f.Err, ErrFrameTooLong) || f.Obj != nil || len(f.Line) != 0 {
		t.Fatalf("the long line: %v, %q…, %v", f.Err, f.Line[:min(len(f.Line), 40)], err)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if held := int64(after.HeapAlloc) - int64(before.HeapAlloc); held > 1<<20 {
		t.Errorf("after a %d-byte line the reader holds %d bytes more", sent, held)
	}
	if f, err = c.Next(); err != nil || f.Type() != proto.FrameDone {
		t.Fatalf("the frame after it: %q, %v", f.Line, err)
	}
	if _, err = c.Next(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}
