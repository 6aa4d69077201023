package peer

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/reply"
)

// maxFrameBytes bounds one frame read back from the writer: a frame holds
// at most a log line (abi.MaxLineBytes) and what names it.
const maxFrameBytes = 2*abi.MaxLineBytes + 64<<10

// FirstFramePatience bounds the wait for a relayed ctl request's first
// frame (a send's is its start, once durable on the writer): a writer that
// took the request and says nothing for this long leaves the caller with
// ETIMEDOUT, not a write that never returns. A send is idempotent by its
// client id, so the caller may send it again.
const FirstFramePatience = 30 * time.Second

// Control sends request line on conn, a connection Dial admitted for a
// ctl file's request (Hello.Session), and reads the writer's first frame:
// an error frame is the writer's refusal, returned as an error with its
// errno and message; the writer's word that the request was begun
// (proto.FrameBegun) begins the reply with the frame after it, whatever
// it is, as any other frame begins it; later frames are read as the
// reader asks for them. Closing the reply closes conn (a
// hang-up, which the writer's reply sees; a run goes on without it).
func Control(conn net.Conn, line []byte) (*session.Reply, error) {
	if len(line) == 0 || line[len(line)-1] != '\n' {
		line = append(line[:len(line):len(line)], '\n')
	}
	conn.SetDeadline(time.Now().Add(FirstFramePatience))
	if _, err := conn.Write(line); err != nil {
		conn.Close()
		return nil, abi.Errorf(syscall.EAGAIN, "ctl", "relaying to the writer host: %v", err)
	}
	br := bufio.NewReader(conn)
	first, begun, err := firstFrame(br)
	conn.SetDeadline(time.Time{})
	if err != nil {
		conn.Close()
		return nil, err
	}
	if errno := refusal(first, begun); errno != 0 {
		conn.Close()
		return nil, &abi.Error{Op: "ctl", Errno: errno, Msg: first.Str("message")}
	}
	frames := make(chan *proto.Object)
	stop := make(chan struct{})
	go func() {
		defer close(frames)
		for f := first; f != nil; {
			select {
			case frames <- f:
			case <-stop:
				return
			}
			if f, err = readFrame(br); err != nil && !errors.Is(err, io.EOF) {
				f = proto.ErrorFrame(err) // the writer's connection broke mid-reply
				select {
				case frames <- f:
				case <-stop:
				}
				return
			}
		}
	}()
	var once sync.Once
	return reply.FromChannel(frames, func() {
		once.Do(func() {
			close(stop)
			conn.Close()
		})
	}), nil
}

// firstFrame reads the reply's first frame (nil when it has none), and
// whether the writer said the request was begun (proto.FrameBegun, which
// is dropped here): then an error frame is the reply's (a resume replays
// the log's), not the refusal it is otherwise, as from a writer that
// does not say it.
func firstFrame(br *bufio.Reader) (first *proto.Object, begun bool, err error) {
	first, err = readFrame(br)
	if err != nil || first.Str("type") != proto.FrameBegun {
		return first, false, err
	}
	if first, err = readFrame(br); errors.Is(err, io.EOF) {
		return nil, true, nil
	}
	return first, true, err
}

// refusal is the errno of a first frame that refuses the request: an
// error frame from a writer that did not say the request was begun (a
// begun reply may have no frame at all).
func refusal(first *proto.Object, begun bool) syscall.Errno {
	if begun {
		return 0
	}
	return proto.FrameErrno(first)
}

// readFrame reads one frame line from the writer: nil and io.EOF at the
// reply's end; EIO for a frame that is not one JSON object, EMSGSIZE for
// one over maxFrameBytes; ETIMEDOUT past the connection's deadline; a
// broken connection is EAGAIN.
func readFrame(br *bufio.Reader) (*proto.Object, error) {
	line, err := proto.ReadLineWithin(br, maxFrameBytes)
	switch {
	case err == nil:
		f, perr := proto.ParseObject(line[:len(line)-1], false)
		if perr != nil {
			return nil, abi.Errorf(syscall.EIO, "ctl", "a frame from the writer host is not a JSON object")
		}
		return f, nil
	case errors.Is(err, proto.ErrLineTooLong):
		return nil, abi.Errorf(syscall.EMSGSIZE, "ctl", "a frame from the writer host over %d bytes", maxFrameBytes)
	case errors.Is(err, io.EOF) && len(line) == 0:
		return nil, io.EOF
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, abi.Errorf(syscall.ETIMEDOUT, "ctl", "no answer from the writer host within %s; a send may be made again with its client id", FirstFramePatience)
	default:
		return nil, abi.Errorf(syscall.EAGAIN, "ctl", "the writer host's reply broke off: %v", err)
	}
}
