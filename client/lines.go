package client

import (
	"bufio"
	"bytes"
	"io"
)

// LineReader reads a stream a line at a time and never holds more than one
// line of at most its bound: a longer line is dropped as it arrives and
// reported as long. Whoever sent it (a server, a log's writer, damage)
// cannot make the reader grow without end.
type LineReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

// NewLineReader reads lines of at most max bytes (without the line end)
// from r.
func NewLineReader(r io.Reader, max int) *LineReader {
	return &LineReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// Next reads up to and including the next newline, or to the end of what
// r gives. It returns the line without its line end (valid until the next
// call); long when the line was over the bound (line is then empty), and
// the read's error (io.EOF at the end, with the last line if it had no
// newline). At end of file it can be called again: it goes on where it
// stopped, seeing what was written since.
func (lr *LineReader) Next() (line []byte, long bool, err error) {
	lr.buf = lr.buf[:0]
	for {
		chunk, err := lr.r.ReadSlice('\n')
		more := err == bufio.ErrBufferFull
		// Inside a line one byte more may be the '\r' of its "\r\n".
		if n := len(lr.buf) + len(chunk); !long && (more && n > lr.max+1 || !more && n-lr.lineEnd(chunk) > lr.max) {
			long, lr.buf = true, nil // what it held goes back at once
		} else if !long {
			lr.buf = append(lr.buf, chunk...)
		}
		if more {
			continue
		}
		if long {
			return nil, true, err
		}
		return bytes.TrimRight(lr.buf, "\r\n"), false, err
	}
}

// lineEnd is how many bytes of the line read so far and its last chunk
// are its line end.
func (lr *LineReader) lineEnd(chunk []byte) int {
	end := len(chunk) - len(bytes.TrimRight(chunk, "\r\n"))
	if end == len(chunk) {
		end += len(lr.buf) - len(bytes.TrimRight(lr.buf, "\r\n"))
	}
	return end
}

// Buffered reports whether bytes that arrived are still unread: Next
// would not wait for r.
func (lr *LineReader) Buffered() bool { return lr.r.Buffered() > 0 }
