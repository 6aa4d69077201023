package reply

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/proto"
)

// A stream keeps only what its readers have not read: a reader that reads
// along costs nothing, one that never reads is cut once it is maxBehind
// behind (its reply says EAGAIN), and the memory held stays bounded.
func TestStreamIsBounded(t *testing.T) {
	st := NewStream()
	fast := New(nil, st.Join())
	slow := New(nil, st.Join())
	frame := proto.NewObject("type", "delta", "text", strings.Repeat("x", 1000))
	ctx := context.Background()
	for i := 0; i < 10000; i++ { // ten MiB, more than twice maxBehind
		st.Push(frame)
		if _, err := fast.Next(ctx); err != nil {
			t.Fatalf("the reader that reads along: %v", err)
		}
		if st.bytes > maxBehind+2000 {
			t.Fatalf("the stream holds %d bytes, bound %d", st.bytes, maxBehind)
		}
	}
	st.End()
	// The slow reader gets what it had before it was cut, then EAGAIN.
	var last *proto.Object
	for {
		f, err := slow.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		last = f
	}
	if last == nil || last.Str("type") != "error" || last.Str("code") != "EAGAIN" {
		t.Fatalf("the reader that never read ends with %v, want an EAGAIN error frame", last)
	}
	if _, err := fast.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("the fast reader after the end: %v", err)
	}
	if st.bytes != 0 {
		t.Fatalf("%d bytes held after every reader finished", st.bytes)
	}
}

// One frame over maxBehind cuts no reader: one that reads along reads it,
// and one that does not is cut only once more than maxBehind is held for
// it besides the frame pushed last.
func TestLongFrameCutsNoReader(t *testing.T) {
	st := NewStream()
	along, idle := New(nil, st.Join()), New(nil, st.Join())
	ctx := context.Background()
	long := proto.NewObject("type", "delta", "text", strings.Repeat("x", 2*maxBehind))
	st.Push(long)
	if f, err := along.Next(ctx); err != nil || f.Str("type") != "delta" {
		t.Fatalf("the reader that reads along, after one long frame: %v %v", f, err)
	}
	st.Push(long)
	if f, err := along.Next(ctx); err != nil || f.Str("type") != "delta" {
		t.Fatalf("the reader that reads along, after a second long frame: %v %v", f, err)
	}
	st.End()
	var last *proto.Object
	for f, err := idle.Next(ctx); err == nil; f, err = idle.Next(ctx) {
		last = f
	}
	if last == nil || last.Str("code") != "EAGAIN" {
		t.Fatalf("the reader that never read ends with %v, want EAGAIN", last)
	}
}

// A kept reader (a child's watcher) is never cut, not even by one frame
// over maxBehind, and the frames held for it alone cut no reader that
// reads along; a reader that does not read is still cut once it is
// maxBehind behind.
func TestKeptReaderIsNotCut(t *testing.T) {
	st := NewStream()
	kept := New(nil, st.JoinKept())
	ctx := context.Background()
	st.Push(proto.NewObject("type", "delta", "text", strings.Repeat("x", maxBehind+1)))
	if f, err := kept.Next(ctx); err != nil || f.Str("type") != "delta" {
		t.Fatalf("the kept reader after one long frame: %v %v", f, err)
	}
	along := New(nil, st.Join())
	idle := New(nil, st.Join())
	small := proto.NewObject("type", "delta", "text", strings.Repeat("y", 1000))
	for i := 0; i < 2000; i++ { // two MiB the kept reader does not read yet
		st.Push(small)
		if f, err := along.Next(ctx); err != nil || f.Str("type") != "delta" {
			t.Fatalf("frame %d: the reader that reads along got %v %v", i, f, err)
		}
	}
	st.End()
	n := 0
	for {
		f, err := kept.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil || f.Str("type") != "delta" {
			t.Fatalf("the kept reader: %v %v", f, err)
		}
		n++
	}
	if n != 2000 {
		t.Fatalf("the kept reader read %d of 2000 frames", n)
	}
	var last *proto.Object
	for f, err := idle.Next(ctx); err == nil; f, err = idle.Next(ctx) {
		last = f
	}
	if last == nil || last.Str("code") != "EAGAIN" {
		t.Fatalf("the reader that never read ends with %v, want EAGAIN", last)
	}
}

// TryNext gives what is ready and never waits: the fixed frames, then
// each pushed frame, nil while the run has pushed nothing more, io.EOF
// once it ended and everything was read.
func TestReplyTryNext(t *testing.T) {
	st := NewStream()
	r := New([]*proto.Object{proto.NewObject("type", "start")}, st.Join())
	defer r.Close()
	want := func(typ string) {
		t.Helper()
		f, err := r.TryNext()
		switch {
		case typ == "" && (f != nil || err != nil):
			t.Fatalf("nothing ready: got %v, %v", f, err)
		case typ == "eof" && !errors.Is(err, io.EOF):
			t.Fatalf("after the end: got %v, %v; want io.EOF", f, err)
		case typ != "" && typ != "eof" && (err != nil || f == nil || f.Str("type") != typ):
			t.Fatalf("got %v, %v; want a %s frame", f, err, typ)
		}
	}
	want("start")
	want("")
	st.Push(proto.NewObject("type", "message"))
	st.Push(proto.NewObject("type", "done"))
	want("message")
	want("done")
	want("")
	st.End()
	want("eof")
}
