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
	"github.com/ctxfs/ctxfs/internal/quota"
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
// reader asks for them. A frame read and not yet read by the reader
// counts with held; one past it ends the reply with the refusal's error
// frame (EAGAIN). Closing the reply closes conn (a hang-up, which the
// writer's reply sees; a run goes on without it).
func Control(conn net.Conn, line []byte, held Held) (*session.Reply, error) {
	if len(line) == 0 || line[len(line)-1] != '\n' {
		line = append(line[:len(line):len(line)], '\n')
	}
	conn.SetDeadline(time.Now().Add(FirstFramePatience))
	if _, err := conn.Write(line); err != nil {
		conn.Close()
		return nil, abi.Errorf(syscall.EAGAIN, "ctl", "relaying to the writer host: %v", err)
	}
	br := bufio.NewReader(conn)
	first, n, begun, err := firstFrame(br)
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
			err := held.take(n)
			if err != nil {
				conn.Close() // the reply ends here: the writer sees a hang-up
				f, n = proto.ErrorFrame(err), 0
			}
			select {
			case frames <- f:
				held.give(n)
			case <-stop:
				held.give(n)
				return
			}
			if err != nil {
				return
			}
			if f, n, err = readFrame(br); err != nil && !errors.Is(err, io.EOF) {
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
func firstFrame(br *bufio.Reader) (first *proto.Object, n int, begun bool, err error) {
	first, n, err = readFrame(br)
	if err != nil || first.Str("type") != proto.FrameBegun {
		return first, n, false, err
	}
	if first, n, err = readFrame(br); errors.Is(err, io.EOF) {
		return nil, 0, true, nil
	}
	return first, n, true, err
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

// Held is where the frames of a relayed reply count while this host
// holds them for a reader who has not read them yet: the caller's
// unfinished bytes (quota.Limits.Partial), as the writer counts what it
// holds for its own mount's readers. Without it a user's unread replies,
// each holding a frame of up to 2 MiB (a resume's log line), held as
// many of them as it could open ctl files. A nil Quota counts nothing.
type Held struct {
	Quota *quota.Quota
	Uid   uint32
}

func (h Held) take(n int) error {
	if h.Quota == nil {
		return nil
	}
	return h.Quota.TakeN(h.Uid, n)
}

func (h Held) give(n int) {
	if h.Quota != nil {
		h.Quota.GiveN(h.Uid, n)
	}
}

// readFrame reads one frame line from the writer: nil and io.EOF at the
// reply's end; EIO for a frame that is not one JSON object, EMSGSIZE for
// one over maxFrameBytes; ETIMEDOUT past the connection's deadline; a
// broken connection is EAGAIN.
func readFrame(br *bufio.Reader) (*proto.Object, int, error) {
	line, err := proto.ReadLineWithin(br, maxFrameBytes)
	switch {
	case err == nil:
		f, perr := proto.ParseObject(line[:len(line)-1], false)
		if perr != nil {
			return nil, 0, abi.Errorf(syscall.EIO, "ctl", "a frame from the writer host is not a JSON object")
		}
		return f, len(line), nil
	case errors.Is(err, proto.ErrLineTooLong):
		return nil, 0, abi.Errorf(syscall.EMSGSIZE, "ctl", "a frame from the writer host over %d bytes", maxFrameBytes)
	case errors.Is(err, io.EOF) && len(line) == 0:
		return nil, 0, io.EOF
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, 0, abi.Errorf(syscall.ETIMEDOUT, "ctl", "no answer from the writer host within %s; a send may be made again with its client id", FirstFramePatience)
	default:
		return nil, 0, abi.Errorf(syscall.EAGAIN, "ctl", "the writer host's reply broke off: %v", err)
	}
}
