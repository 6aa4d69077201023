package session

import (
	"bytes"
	"io"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/layout"
)

// recordedChunk is how much of a log a recorded reply reads at a time
// (more when one line is longer).
const recordedChunk = 64 << 10

// recorded is the lines of a session's events.jsonl in [off, end) as
// frames, read from the log as a reply is read (reply.NewFrom): a reply
// no client reads holds none of them, and one being read at most a chunk
// of whole lines. A `resume` of a long session used to parse its whole
// log into the reply at once, and a uid's unread replies (a socket's, a
// ctl file's) could make the server hold several times the log for each.
// Each read takes the session anew (Engine.lookup) and lets it go: an
// unread reply pins nothing, and the bytes below end are the same in a
// session loaded again (a log only grows, and a load verifies it). A
// session gone meanwhile (archived, deleted) ends the reply with its
// error.
type recorded struct {
	e        *Engine
	ref      layout.Ref
	off, end int64
	lines    []byte // whole lines read and not yet handed out
}

// next is the next line's frame (a line that is not an object is passed
// over, as the log's readers do), io.EOF at end.
func (r *recorded) next() (*proto.Object, error) {
	for {
		if len(r.lines) == 0 {
			if r.off >= r.end {
				return nil, io.EOF
			}
			if err := r.read(); err != nil {
				return nil, err
			}
		}
		line, rest, _ := bytes.Cut(r.lines, []byte{'\n'})
		r.lines = rest
		if len(rest) == 0 {
			r.lines = nil // the chunk goes with its last line (a reply read in part held a long line's whole)
		}
		if o, err := proto.ParseObject(line, false); err == nil {
			return o, nil // ParseObject copies: the chunk is not held by the frame
		}
	}
}

// read reads the next whole lines: a chunk, or the one line longer than
// it.
func (r *recorded) read() error {
	s, release, err := r.e.lookup(r.ref)
	if err != nil {
		return err
	}
	defer release()
	for _, most := range []int64{recordedChunk, abi.MaxLineBytes + 1} {
		b := make([]byte, min(r.end-r.off, most))
		if n, err := s.events.ReadAt(b, r.off); n < len(b) {
			if err == nil || err == io.EOF {
				err = abi.Errorf(syscall.EIO, "resume", "%s: events.jsonl is shorter than when the reply began", r.ref.Name)
			}
			return err
		}
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			r.lines, r.off = b[:i+1], r.off+int64(i)+1
			return nil
		}
		if int64(len(b)) == r.end-r.off { // the log's last line (a log holds whole lines)
			r.lines, r.off = append(b, '\n'), r.end
			return nil
		}
	}
	return abi.Errorf(syscall.EIO, "resume", "%s: a line of events.jsonl is over %d bytes", r.ref.Name, abi.MaxLineBytes)
}
