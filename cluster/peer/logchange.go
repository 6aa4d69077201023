package peer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
)

// A change to a session log made through a follower's mount travels as
// one LogChange line, the bytes it appends after it, and the writer's one
// answer line (Admit's and Refuse's shape), on a connection whose hello
// names the session and the log (Hello.Session, Hello.Log).

// LogChange is one change to a session log.
type LogChange struct {
	// Op is "append" (Size bytes of whole lines follow, made durable
	// before the answer) or "loss" (a writer's unfinished line dropped at
	// its last close: Size bytes lost, recorded with Errno and Why).
	Op    string `json:"op"`
	Size  int    `json:"size"`
	Errno string `json:"errno,omitempty"`
	Why   string `json:"why,omitempty"`
}

// Log change ops.
const (
	LogAppend = "append"
	LogLoss   = "loss"
)

// Bounds of a log change.
const (
	// MaxLogAppend bounds the bytes one append carries (EMSGSIZE beyond):
	// a mount write (1 MiB) after the rest of a line it finishes (at most
	// a log line).
	MaxLogAppend = 2*abi.MaxLineBytes + 64<<10
	// maxChangeLine bounds the LogChange line.
	maxChangeLine = 4 << 10
	// maxWhy bounds a loss's reason.
	maxWhy = 1000
	// ChangeDeadline bounds the whole exchange, as seen by either side.
	ChangeDeadline = 30 * time.Second
)

// check refuses a change no mount could have made (EINVAL, EMSGSIZE).
func (ch LogChange) check() error {
	switch {
	case ch.Op == LogAppend && (ch.Size <= 0 || ch.Size > MaxLogAppend):
		return abi.Errorf(syscall.EMSGSIZE, "log", "an append of %d bytes (1 to %d)", ch.Size, MaxLogAppend)
	case ch.Op == LogAppend:
		return nil
	case ch.Op != LogLoss:
		return abi.Errorf(syscall.EINVAL, "log", "no log change is %q", ch.Op)
	case ch.Size < 0 || len(ch.Why) > maxWhy:
		return abi.Errorf(syscall.EINVAL, "log", "a loss of %d bytes, or its reason over %d bytes", ch.Size, maxWhy)
	}
	if _, ok := abi.ErrnoFromName(ch.Errno); !ok {
		return abi.Errorf(syscall.EINVAL, "log", "no errno is %q", ch.Errno)
	}
	return nil
}

// SendLogChange sends ch (and data, an append's bytes, whose length is
// its Size; a loss carries none) on conn, a
// connection Dial admitted with a hello naming the log, and returns the
// writer's answer: nil once the change is made (an append durable), or
// the writer's errno. conn is closed.
func SendLogChange(conn net.Conn, ch LogChange, data []byte) error {
	defer conn.Close()
	if ch.Op == LogAppend {
		ch.Size = len(data)
	}
	line, err := json.Marshal(ch)
	if err != nil {
		return abi.Errorf(syscall.EINVAL, "log", "%v", err)
	}
	conn.SetDeadline(time.Now().Add(ChangeDeadline))
	if _, err := conn.Write(append(append(line, '\n'), data...)); err != nil {
		return abi.Errorf(syscall.EAGAIN, "log", "relaying to the writer host: %v", err)
	}
	raw, err := readLine(conn, maxAnswerBytes, "answer")
	if isTimeout(err) {
		return abi.Errorf(syscall.ETIMEDOUT, "log", "no answer from the writer host within %s", ChangeDeadline)
	} else if err != nil {
		return abi.Errorf(syscall.EAGAIN, "log", "the writer host's answer broke off: %v", err)
	}
	var a answer
	if json.Unmarshal(raw, &a) != nil {
		return abi.Errorf(syscall.EIO, "log", "the writer host's answer is not JSON")
	}
	if a.OK {
		return nil
	}
	errno, ok := abi.ErrnoFromName(a.Errno)
	if !ok {
		errno = syscall.EIO
	}
	return &abi.Error{Op: "log", Errno: errno, Msg: a.Message}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// ReadLogChange reads a log change and, for an append, its bytes, from a
// connection admitted with a hello naming a log, within ChangeDeadline:
// what no mount could have sent is refused (EINVAL, EMSGSIZE) before any
// byte of an append is read.
func ReadLogChange(conn net.Conn) (LogChange, []byte, error) {
	conn.SetReadDeadline(time.Now().Add(ChangeDeadline))
	defer conn.SetReadDeadline(time.Time{})
	raw, err := readLine(conn, maxChangeLine, "log change")
	if err != nil {
		return LogChange{}, nil, err
	}
	var ch LogChange
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ch); err != nil {
		return LogChange{}, nil, abi.Errorf(syscall.EINVAL, "log", "%v", err)
	}
	if err := ch.check(); err != nil {
		return LogChange{}, nil, err
	}
	if ch.Op != LogAppend {
		return ch, nil, nil
	}
	data := make([]byte, ch.Size)
	if _, err := io.ReadFull(conn, data); err != nil {
		return LogChange{}, nil, fmt.Errorf("log change: %d bytes: %w", ch.Size, err)
	}
	return ch, data, nil
}

// AnswerChange answers a log change: done (err nil) or err's errno.
func AnswerChange(conn net.Conn, err error) error {
	if err == nil {
		return Admit(conn)
	}
	return Refuse(conn, err)
}
