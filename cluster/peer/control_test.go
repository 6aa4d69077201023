package peer

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// writerSide plays the writer host on the far end of a pipe: it reads the
// request line, checks it, then writes answer and closes.
func writerSide(t *testing.T, wantLine, answer string) net.Conn {
	t.Helper()
	near, far := net.Pipe()
	go func() {
		defer far.Close()
		line, err := bufio.NewReader(far).ReadString('\n')
		if err != nil || line != wantLine {
			t.Errorf("the writer read %q (%v), want %q", line, err, wantLine)
			return
		}
		io.WriteString(far, answer)
	}()
	return near
}

// TestControlFrames: a relayed ctl request's reply as its reader sees it:
// the frames in order to the end; a first error frame is the refusal, with
// its errno and message; a frame that is not JSON, one over the bound, a
// reply broken off mid-frame end the reply with an error frame.
func TestControlFrames(t *testing.T) {
	req := `{"op":"send","id":"c","input":"x"}`
	r, err := Control(writerSide(t, req+"\n", `{"type":"start","run":"r"}`+"\n"+`{"type":"done","status":"ok"}`+"\n"), []byte(req))
	testkit.Must(t, err)
	var types []string
	for {
		f, err := r.Next(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		testkit.Must(t, err)
		types = append(types, f.Str("type"))
	}
	r.Close()
	if strings.Join(types, ",") != "start,done" {
		t.Errorf("frames %v, want start,done", types)
	}

	_, err = Control(writerSide(t, req+"\n", `{"type":"error","code":"EACCES","message":"not yours"}`+"\n"), []byte(req+"\n"))
	testkit.WantErrno(t, "a refusal", err, syscall.EACCES, "not yours")

	_, err = Control(writerSide(t, req+"\n", "not json\n"), []byte(req))
	testkit.WantErrno(t, "a first frame that is not JSON", err, syscall.EIO)

	_, err = Control(writerSide(t, req+"\n", strings.Repeat("x", maxFrameBytes+1)+"\n"), []byte(req))
	testkit.WantErrno(t, "a first frame over the bound", err, syscall.EMSGSIZE)

	r, err = Control(writerSide(t, req+"\n", `{"type":"start","run":"r"}`+"\n"+`{"type":"del`), []byte(req))
	testkit.Must(t, err)
	first, _ := r.Next(context.Background())
	last, _ := r.Next(context.Background())
	if first.Str("type") != "start" || last.Str("type") != "error" || last.Str("code") != "EAGAIN" {
		t.Errorf("a reply broken off: %v then %v, want start then an EAGAIN error frame", first, last)
	}
	if _, err := r.Next(context.Background()); !errors.Is(err, io.EOF) {
		t.Errorf("after the error frame: %v, want EOF", err)
	}
	r.Close()
}
