package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/proto"
)

// DialError is a failure to reach a socket at all: nothing was sent.
type DialError struct {
	Path string
	Err  error
}

func (e *DialError) Error() string { return fmt.Sprintf("connect %s: %v", e.Path, e.Err) }
func (e *DialError) Unwrap() error { return e.Err }

// ServerDown reports whether the failure means that no server listens
// there: the socket is missing (never mounted, or an unknown agent) or
// refuses connections (a stale socket of a stopped server).
func (e *DialError) ServerDown() bool { return notListening(e.Err) }

// Frame is one reply line. Obj is nil when the line is not a JSON object;
// Err then says why. Line is the line as received, without its newline.
type Frame struct {
	Line []byte
	Obj  *proto.Object
	Err  error
}

// Type is the frame's "type", or "" for a line that did not parse.
func (f Frame) Type() string {
	if f.Obj == nil {
		return ""
	}
	return f.Obj.Str("type")
}

// MaxFrameBytes bounds one frame a FrameReader holds. The largest frames
// the server makes are a model's deltas, each the text of one event of at
// most 4 MiB (provider.MaxEventBytes), which JSON may write at up to twice
// its bytes (U+2028 and U+2029 are escaped); log lines and messages are at
// most abi.MaxLineBytes. A longer line is dropped as it arrives, so a
// stream that never ends a line costs its reader 16 MiB at most.
const MaxFrameBytes = 16 << 20

// ErrFrameTooLong is the Err of a frame whose line was over MaxFrameBytes.
var ErrFrameTooLong = fmt.Errorf("a reply line of over %d bytes (dropped)", MaxFrameBytes)

// FrameReader splits a reply stream into frames, one JSON line each.
type FrameReader struct {
	lr *LineReader
}

// NewFrameReader reads frames from r.
func NewFrameReader(r io.Reader) *FrameReader {
	return &FrameReader{lr: NewLineReader(r, MaxFrameBytes)}
}

// Next returns the next frame, or io.EOF after the last. Blank lines are
// skipped. A last line without its newline still counts: the reply ended,
// and dropping what arrived would hide it. A malformed line is returned as a
// Frame with Err set, not as an error, so that the caller can go on; so is
// a line over MaxFrameBytes (ErrFrameTooLong, Line empty).
func (fr *FrameReader) Next() (Frame, error) {
	for {
		line, long, err := fr.lr.Next()
		if long {
			return Frame{Err: ErrFrameTooLong}, nil
		}
		if len(line) > 0 {
			line = bytes.Clone(line) // the reader's buffer is reused
			obj, perr := proto.ParseObject(line, false)
			return Frame{Line: line, Obj: obj, Err: perr}, nil
		}
		if err != nil {
			return Frame{}, err
		}
	}
}

// Buffered reports whether part of a frame that has arrived is still
// unread: Next would not wait for the connection. A printer that buffers
// its output flushes it when this is false, before Next waits.
func (fr *FrameReader) Buffered() bool { return fr.lr.Buffered() }

// Conn is one request on one socket connection.
type Conn struct {
	nc net.Conn
	*FrameReader
}

// Dial connects to a Unix stream socket. Cancelling ctx closes the
// connection, which unblocks a pending Next; per SPEC section 7 that never
// stops a run on the server.
func Dial(ctx context.Context, path string) (*Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, &DialError{Path: path, Err: err}
	}
	context.AfterFunc(ctx, func() { nc.Close() })
	return &Conn{nc: nc, FrameReader: NewFrameReader(nc)}, nil
}

// SocketWait is how long DialWaiting waits for the socket of a definition
// that exists but has none yet: the server makes one as soon as it sees
// the definition's directory (at once with inotify, else within a
// second), which may be just after a script made it.
const SocketWait = 2 * time.Second

// socketPoll is how often DialWaiting tries again.
const socketPoll = 20 * time.Millisecond

// DialWaiting is Dial, except that while nothing listens at path (no
// socket yet, ENOENT, or the one a stopped server left, ECONNREFUSED) and
// expected reports that a socket should answer there (its definition
// exists, a server runs), it tries again every socketPoll, for at most
// SocketWait. The error is then the last Dial's.
func DialWaiting(ctx context.Context, path string, expected func() bool) (*Conn, error) {
	c, err := Dial(ctx, path)
	if err == nil || !notListening(err) || !expected() {
		return c, err
	}
	limit := time.NewTimer(SocketWait)
	defer limit.Stop()
	poll := time.NewTicker(socketPoll)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, err
		case <-limit.C:
			return nil, err
		case <-poll.C:
		}
		c, err = Dial(ctx, path)
		if err == nil || !notListening(err) || !expected() {
			return c, err
		}
	}
}

// notListening: no server listens at the socket's path (yet).
func notListening(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
}

// Send writes the one request line of this connection.
func (c *Conn) Send(req *proto.Object) error {
	_, err := c.nc.Write(req.Line())
	return err
}

// Close closes the connection.
func (c *Conn) Close() error { return c.nc.Close() }

// Call sends req to the socket at path and returns every reply frame until
// end of file. It is for the short ops (status, cancel, ping).
func Call(ctx context.Context, path string, req *proto.Object) ([]Frame, error) {
	c, err := Dial(ctx, path)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.Send(req); err != nil {
		return nil, err
	}
	var frames []Frame
	for {
		f, err := c.Next()
		if err == io.EOF {
			return frames, nil
		}
		if err != nil {
			return frames, err
		}
		frames = append(frames, f)
	}
}

// ServerError is an error frame: the errno name the server reported and
// its message, which is for people only (clients never parse it).
type ServerError struct {
	Code    string
	Message string
}

func (e *ServerError) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// Errno is the errno of Code, or EIO for a name the ABI does not know.
func (e *ServerError) Errno() syscall.Errno {
	if n, ok := abi.ErrnoFromName(e.Code); ok {
		return n
	}
	return syscall.EIO
}

// Refusal returns the error of a refused request: a reply that is exactly
// one error frame (SPEC section 7). It returns nil for any other reply.
func Refusal(frames []Frame) *ServerError {
	if len(frames) != 1 || frames[0].Type() != proto.FrameError {
		return nil
	}
	return FrameError(frames[0].Obj)
}

// FrameError reads an error frame. Servers build the message from an
// abi.Error, which already names the errno ("send: EINVAL: bad id"); the
// name is removed from the message so that it is not printed twice.
func FrameError(f *proto.Object) *ServerError {
	code := f.Str("code")
	if code == "" {
		code = "EIO"
	}
	msg := f.Str("message")
	if i := strings.Index(msg, code+": "); i >= 0 {
		msg = msg[:i] + msg[i+len(code)+2:]
	} else {
		msg = strings.TrimSuffix(strings.TrimSuffix(msg, code), ": ")
	}
	return &ServerError{Code: code, Message: msg}
}
