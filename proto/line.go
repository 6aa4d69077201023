package proto

import (
	"bufio"
	"bytes"
	"errors"
)

// The two ways a line of a stream is bounded: ReadLine skips a line over
// its bound and goes on (a program's output, where one bad line must not
// end the run); ReadLineWithin stops at it (a request or a peer's reply,
// where the rest of the stream cannot be trusted once its framing broke).
// Each caller names its own errno for a line too long.

// ReadLine reads one line without its newline. A line longer than limit is
// consumed and reported as tooLong instead of returned. err is non-nil at
// the end of the stream (the last line may lack its newline).
func ReadLine(br *bufio.Reader, limit int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong && len(line)+len(chunk) <= limit+1 {
			line = append(line, chunk...)
		} else {
			tooLong, line = true, nil
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return bytes.TrimSuffix(line, []byte("\n")), tooLong, err
	}
}

// ErrLineTooLong is ReadLineWithin's report of a line over its bound.
var ErrLineTooLong = errors.New("line over its bound")

// ReadLineWithin reads one line, its newline included when it has one. A
// line longer than limit, its newline not counted, is ErrLineTooLong as
// soon as a read of the buffer passes the bound (the rest is not read: a
// stream without newlines costs limit bytes and one buffer, no more).
// Otherwise err is the reader's: nil for a line that ended in a newline,
// io.EOF with the last line unterminated (or none), or the stream's error
// (a deadline, a broken connection) with what came before it.
func ReadLineWithin(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...) // a copy: the reader's buffer is reused
		if n := len(line); n > limit && !(n == limit+1 && line[limit] == '\n') {
			return nil, ErrLineTooLong
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}
