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

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
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
	r, err := Control(writerSide(t, req+"\n", `{"type":"start","run":"r"}`+"\n"+`{"type":"done","status":"ok"}`+"\n"), []byte(req), Held{})
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

	_, err = Control(writerSide(t, req+"\n", `{"type":"error","code":"EACCES","message":"not yours"}`+"\n"), []byte(req+"\n"), Held{})
	testkit.WantErrno(t, "a refusal", err, syscall.EACCES, "not yours")

	_, err = Control(writerSide(t, req+"\n", "not json\n"), []byte(req), Held{})
	testkit.WantErrno(t, "a first frame that is not JSON", err, syscall.EIO)

	_, err = Control(writerSide(t, req+"\n", strings.Repeat("x", maxFrameBytes+1)+"\n"), []byte(req), Held{})
	testkit.WantErrno(t, "a first frame over the bound", err, syscall.EMSGSIZE)

	r, err = Control(writerSide(t, req+"\n", `{"type":"start","run":"r"}`+"\n"+`{"type":"del`), []byte(req), Held{})
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

	// Once the writer says the request was begun, an error frame is the
	// reply's (a resume replays recorded ones); a begun reply may be empty.
	r, err = Control(writerSide(t, req+"\n", `{"type":"begun"}`+"\n"+`{"type":"error","code":"EINVAL","message":"a lost line"}`+"\n"), []byte(req), Held{})
	testkit.Must(t, err)
	if f, _ := r.Next(context.Background()); f.Str("type") != "error" || f.Str("code") != "EINVAL" {
		t.Errorf("a begun reply's first frame: %v, want the recorded error", f)
	}
	r.Close()
	r, err = Control(writerSide(t, req+"\n", `{"type":"begun"}`+"\n"), []byte(req), Held{})
	testkit.Must(t, err)
	if _, err := r.Next(context.Background()); !errors.Is(err, io.EOF) {
		t.Errorf("an empty begun reply: %v, want EOF", err)
	}
	r.Close()
}

// TestReadChange: what no mount could have sent is refused with its
// errno before any byte of an append is read; an append's bytes come
// whole.
func TestReadChange(t *testing.T) {
	read := func(sent string) (FileChange, []byte, error) {
		near, far := net.Pipe()
		defer near.Close()
		go func() { io.WriteString(far, sent); far.Close() }()
		return ReadChange(near)
	}
	for _, c := range []struct {
		sent string
		want syscall.Errno
	}{
		{`{"op":"append","size":0}` + "\n", syscall.EMSGSIZE},
		{`{"op":"append","size":-1}` + "\n", syscall.EMSGSIZE},
		{`{"op":"append","size":99999999}` + "\n", syscall.EMSGSIZE},
		{`{"op":"truncate","size":1}` + "\n", syscall.EINVAL},
		{`{"op":"loss","size":3,"errno":"ENOSUCH"}` + "\n", syscall.EINVAL},
		{`{"op":"loss","size":-3,"errno":"EINVAL"}` + "\n", syscall.EINVAL},
		{`{"op":"loss","size":3,"errno":"EINVAL","why":"` + strings.Repeat("w", maxWhy+1) + `"}` + "\n", syscall.EINVAL},
		{`{"op":"append","size":1,"path":"/etc/passwd"}` + "\n", syscall.EINVAL},
		{`not json` + "\n", syscall.EINVAL},
		{`{"op":"mkdir","size":3}` + "\n", syscall.EINVAL},
		{`{"op":"setattr","size":5000}` + "\n", syscall.EMSGSIZE},
		{`{"op":"rename","size":0}` + "\n", syscall.EMSGSIZE},
		{`{"op":"unlink","size":0,"errno":"EIO"}` + "\n", syscall.EINVAL},
		{strings.Repeat(" ", maxChangeLine+1) + "\n", syscall.EMSGSIZE},
	} {
		_, _, err := read(c.sent)
		testkit.WantErrno(t, abi.Clip(c.sent, 60), err, c.want)
	}
	ch, data, err := read(`{"op":"append","size":6}` + "\n" + "{}\n{}\n")
	testkit.Must(t, err)
	if ch.Op != LogAppend || string(data) != "{}\n{}\n" {
		t.Errorf("an append: %+v %q", ch, data)
	}
	if ch, data, err := read(`{"op":"mkdir"}` + "\n" + "trailing"); err != nil || ch.Op != TreeMkdir || data != nil {
		t.Errorf("a mkdir: %+v %q %v", ch, data, err)
	}
	if _, _, err := read(`{"op":"append","size":6}` + "\n" + "{}\n"); err == nil {
		t.Errorf("an append cut short was taken")
	}
}

// TestDecodeTreeChanges: a setattr's and a rename's bytes are read
// strictly (EINVAL for an unknown field, bytes after the value, a target
// outside the tree or in a free tree), and a touch to the present is
// made at the reader's present, whatever times it carried.
func TestDecodeTreeChanges(t *testing.T) {
	for _, bad := range []string{`{"mode":420,"owner":0}`, `{"mode":420} {}`, `[]`, `{"times":"now"}`} {
		_, err := DecodeAttrs([]byte(bad))
		testkit.WantErrno(t, bad, err, syscall.EINVAL)
	}
	a, err := DecodeAttrs([]byte(`{"times":[{"Sec":1,"Nsec":0},{"Sec":0,"Nsec":1073741822}],"now":true}`))
	testkit.Must(t, err)
	if a.Times[0].Nsec != unix.UTIME_NOW || a.Times[1].Nsec != unix.UTIME_OMIT {
		t.Errorf("a touch to the present decoded as %+v", a.Times)
	}
	for _, bad := range []string{`{"to":"../etc","flags":1}`, `{"to":"/etc/passwd","flags":1}`, `{"to":"home/1001/agent/coder/root/x","flags":1}`, `{"to":"home/1001/x","flags":1}`, `{"to":"home/1001/archived_sessions/coder/k","flags":1,"x":1}`} {
		_, err := DecodeRename([]byte(bad))
		testkit.WantErrno(t, bad, err, syscall.EINVAL)
	}
	r, err := DecodeRename([]byte(`{"to":"home/1001/archived_sessions/coder/k","flags":1}`))
	testkit.Must(t, err)
	if r.To != "home/1001/archived_sessions/coder/k" || r.Flags != 1 {
		t.Errorf("a rename decoded as %+v", r)
	}
}
