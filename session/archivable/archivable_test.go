package archivable

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/layout"
)

var coder = layout.Container{Home: "home/1001", Kind: abi.KindAgent, Owner: "coder"}

// TestAnswerInOrder: the outcomes in the order of the names, those to
// archive grouped between the others (each with its errno and reason),
// the check asked about the container's session of each name, then the
// checked frame.
func TestAnswerInOrder(t *testing.T) {
	check := func(r layout.Ref) error {
		if r.Container != coder {
			t.Errorf("checked %+v, not a session of %+v", r, coder)
		}
		switch r.Name {
		case "cur":
			return abi.Errorf(syscall.EBUSY, "archive", "session cur is the current session")
		case "gone":
			return abi.Errorf(syscall.ENOENT, "session", "no such session")
		}
		return nil
	}
	rep := Answer(coder, []string{"b", "c", "cur", "a", "gone", "d"}, check)
	defer rep.Close()
	var got []string
	for {
		f, err := rep.Next(context.Background())
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(f.Line()))
	}
	want := []string{
		`{"type":"archivable","sessions":["b","c"]}`,
		`{"type":"kept","session":"cur","code":"EBUSY","message":"archive: EBUSY: session cur is the current session"}`,
		`{"type":"archivable","sessions":["a"]}`,
		`{"type":"kept","session":"gone","code":"ENOENT","message":"session: ENOENT: no such session"}`,
		`{"type":"archivable","sessions":["d"]}`,
		`{"type":"checked","sessions":6}`,
	}
	if fmt.Sprint(got) != fmt.Sprint(addNewlines(want)) {
		t.Fatalf("frames\n%q\nwant\n%q", got, want)
	}
}

func addNewlines(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = l + "\n"
	}
	return out
}

// TestAnswerBoundedAhead: a reader that reads nothing holds the checks
// at FrameRoom frames ahead (the rest of the names are not checked), and
// closing the reply ends them. Every other session is kept, so that each
// makes a frame.
func TestAnswerBoundedAhead(t *testing.T) {
	names := make([]string, 10*FrameRoom)
	for i := range names {
		names[i] = fmt.Sprint("s", i)
	}
	var checks atomic.Int64
	done := make(chan struct{})
	rep := Answer(coder, names, func(r layout.Ref) error {
		n := checks.Add(1)
		if n == int64(len(names)) {
			close(done)
		}
		if n%2 == 0 {
			return abi.Errorf(syscall.EBUSY, "archive", "busy")
		}
		return nil
	})
	time.Sleep(200 * time.Millisecond) // time enough to run ahead, were it unbounded
	if n := checks.Load(); n > 2*FrameRoom+2 {
		t.Fatalf("%d sessions checked for a reader that read nothing (room %d)", n, FrameRoom)
	}
	f, err := rep.Next(context.Background())
	if err != nil || f.Str("type") != proto.FrameArchivable {
		t.Fatalf("first frame %v %v", f, err)
	}
	rep.Close()
	time.Sleep(100 * time.Millisecond)
	if n := checks.Load(); n > 2*FrameRoom+6 {
		t.Fatalf("%d sessions checked after the reader left", n)
	}
	select {
	case <-done:
		t.Fatal("every session was checked for a reader that left")
	default:
	}
}
