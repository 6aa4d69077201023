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

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/session"
)

// A change made through a follower's mount travels as one FileChange
// line, the bytes it carries after it, and the writer's one answer line
// (Admit's and Refuse's shape), on a connection whose hello names what
// it changes: a session's log or writable value (Hello.Session,
// Hello.File), or another place of the tree (Hello.Path).

// FileChange is one change to a session's file.
type FileChange struct {
	// Op is, for a log, "append" (Size bytes of whole lines follow, made
	// durable before the answer) or "loss" (a writer's unfinished line
	// dropped at its last close: Size bytes lost, recorded with Errno and
	// Why); for a value, "write" (its new content, Size bytes, replaces it
	// whole). For another place of the tree: "mkdir" (a directory made
	// there), "write" (an index value, Size bytes), "unlink" (an index
	// value removed), "setattr" (its attributes changed: a
	// session.SetAttr, Size bytes of JSON), "rename" (moved: a Rename,
	// Size bytes of JSON).
	Op    string `json:"op"`
	Size  int    `json:"size"`
	Errno string `json:"errno,omitempty"`
	Why   string `json:"why,omitempty"`
}

// File change ops.
const (
	LogAppend   = "append"
	LogLoss     = "loss"
	ValueWrite  = "write"
	TreeMkdir   = "mkdir"
	TreeUnlink  = "unlink"
	TreeSetattr = "setattr"
	TreeRename  = "rename"
)

// Rename is a rename's target and flags (renameat2's).
type Rename struct {
	To    string `json:"to"`
	Flags uint32 `json:"flags"`
}

// DecodeAttrs and DecodeRename read a setattr's and a rename's bytes
// strictly (EINVAL): what no mount could have sent is refused. A touch to
// the present is made at the reader's present (UTIME_NOW), whatever times
// came with it.
func DecodeAttrs(data []byte) (session.SetAttr, error) {
	var a session.SetAttr
	if err := decodeStrict(data, &a); err != nil {
		return a, err
	}
	if a.Now && a.Times != nil {
		for i := range a.Times {
			if a.Times[i].Nsec != unix.UTIME_OMIT {
				a.Times[i] = unix.Timespec{Nsec: unix.UTIME_NOW}
			}
		}
	}
	return a, nil
}

func DecodeRename(data []byte) (r Rename, err error) {
	if err := decodeStrict(data, &r); err != nil {
		return r, err
	}
	if !CleanRel(r.To) || !relayedPlace(r.To) {
		return r, abi.Errorf(syscall.EINVAL, "rename", "%q is no path of the tree", r.To)
	}
	return r, nil
}

// decodeStrict decodes one JSON value of data into v, unknown fields and
// trailing bytes refused (EINVAL).
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return abi.Errorf(syscall.EINVAL, "change", "%v", err)
	}
	if dec.More() {
		return abi.Errorf(syscall.EINVAL, "change", "bytes after the change's value")
	}
	return nil
}

// IsLog says whether file is a session log, whose changes are appends
// and losses.
func IsLog(file string) bool { return file == abi.FileMessages || file == abi.FileEvents }

// IsValue says whether file is a value written through the mount, whose
// change is a write.
func IsValue(file string) bool {
	return file == abi.FileState || file == abi.FileCwd || file == abi.FileMeta
}

// Bounds of a log change.
const (
	// MaxChangeBytes bounds the bytes one change carries (EMSGSIZE
	// beyond): a mount write (1 MiB) after the rest of a line it finishes
	// (at most a log line); a value is far smaller.
	MaxChangeBytes = 2*abi.MaxLineBytes + 64<<10
	// maxAttrBytes bounds a setattr's and a rename's JSON: a few numbers,
	// a path of the tree.
	maxAttrBytes = 4 << 10
	// maxChangeLine bounds the FileChange line.
	maxChangeLine = 4 << 10
	// maxWhy bounds a loss's reason.
	maxWhy = 1000
	// ChangeDeadline bounds the whole exchange, as seen by either side.
	ChangeDeadline = 30 * time.Second
)

// carries says whether a change of op carries bytes of its own.
func carries(op string) bool {
	return op == LogAppend || op == ValueWrite || op == TreeSetattr || op == TreeRename
}

// check refuses a change no mount could have made (EINVAL, EMSGSIZE).
func (ch FileChange) check() error {
	switch {
	case carries(ch.Op) && (ch.Size <= 0 || ch.Size > MaxChangeBytes):
		return abi.Errorf(syscall.EMSGSIZE, "change", "a change of %d bytes (1 to %d)", ch.Size, MaxChangeBytes)
	case (ch.Op == TreeSetattr || ch.Op == TreeRename) && ch.Size > maxAttrBytes:
		return abi.Errorf(syscall.EMSGSIZE, "change", "a %s of %d bytes (at most %d)", ch.Op, ch.Size, maxAttrBytes)
	case carries(ch.Op):
		return nil
	case ch.Op == TreeMkdir || ch.Op == TreeUnlink:
		if ch.Size != 0 || ch.Errno != "" || ch.Why != "" {
			return abi.Errorf(syscall.EINVAL, "change", "a %s carries nothing", ch.Op)
		}
		return nil
	case ch.Op != LogLoss:
		return abi.Errorf(syscall.EINVAL, "change", "no file change is %q", ch.Op)
	case ch.Size < 0 || len(ch.Why) > maxWhy:
		return abi.Errorf(syscall.EINVAL, "change", "a loss of %d bytes, or its reason over %d bytes", ch.Size, maxWhy)
	}
	if _, ok := abi.ErrnoFromName(ch.Errno); !ok {
		return abi.Errorf(syscall.EINVAL, "change", "no errno is %q", ch.Errno)
	}
	return nil
}

// SendChange sends ch (and data, an append's or a write's bytes, whose
// length is its Size; a loss carries none) on conn, a connection Dial
// admitted with a hello naming the file, and returns the writer's answer:
// nil once the change is made (an append durable), or the writer's
// errno. conn is closed.
func SendChange(conn net.Conn, ch FileChange, data []byte) error {
	defer conn.Close()
	if ch.Op != LogLoss {
		ch.Size = len(data) // a mkdir's and an unlink's: 0
	}
	line, err := json.Marshal(ch)
	if err != nil {
		return abi.Errorf(syscall.EINVAL, "change", "%v", err)
	}
	conn.SetDeadline(time.Now().Add(ChangeDeadline))
	if _, err := conn.Write(append(append(line, '\n'), data...)); err != nil {
		return abi.Errorf(syscall.EAGAIN, "change", "relaying to the writer host: %v", err)
	}
	raw, err := readLine(conn, maxAnswerBytes, "answer")
	if isTimeout(err) {
		return abi.Errorf(syscall.ETIMEDOUT, "change", "no answer from the writer host within %s", ChangeDeadline)
	} else if err != nil {
		return abi.Errorf(syscall.EAGAIN, "change", "the writer host's answer broke off: %v", err)
	}
	var a answer
	if json.Unmarshal(raw, &a) != nil {
		return abi.Errorf(syscall.EIO, "change", "the writer host's answer is not JSON")
	}
	if a.OK {
		return nil
	}
	return &abi.Error{Op: "change", Errno: a.errno(), Msg: a.Message}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// ReadChange reads a file change and the bytes it carries (an append's,
// a write's) from a connection admitted with a hello naming the file,
// within ChangeDeadline: what no mount could have sent is refused
// (EINVAL, EMSGSIZE) before any of its bytes is read.
func ReadChange(conn net.Conn) (FileChange, []byte, error) {
	conn.SetReadDeadline(time.Now().Add(ChangeDeadline))
	defer conn.SetReadDeadline(time.Time{})
	raw, err := readLine(conn, maxChangeLine, "file change")
	if err != nil {
		return FileChange{}, nil, err
	}
	var ch FileChange
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ch); err != nil {
		return FileChange{}, nil, abi.Errorf(syscall.EINVAL, "change", "%v", err)
	}
	if err := ch.check(); err != nil {
		return FileChange{}, nil, err
	}
	if ch.Op == LogLoss || ch.Size == 0 {
		return ch, nil, nil // a loss's size is what was lost; a mkdir and an unlink carry nothing
	}
	data := make([]byte, ch.Size)
	if _, err := io.ReadFull(conn, data); err != nil {
		return FileChange{}, nil, fmt.Errorf("file change: %d bytes: %w", ch.Size, err)
	}
	return ch, data, nil
}

// AnswerChange answers a file change: done (err nil) or err's errno.
func AnswerChange(conn net.Conn, err error) error {
	if err == nil {
		return Admit(conn)
	}
	return Refuse(conn, err)
}
