package provider

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// This file is a small reader of server-sent events (the WHATWG "event
// stream" format) as both APIs stream them: it handles "data:" with and
// without a space, multi-line data joined with "\n", comments, "event:"
// lines, LF, CRLF and lone CR line ends, and a leading BOM. "id:" and
// "retry:" are ignored: nothing here reconnects.

// sseEvent is one dispatched event. Name is "" when the event had no
// "event:" line.
type sseEvent struct {
	Name, Data string
}

var (
	// errLineTooLong is returned for a line, or an event's data, over the limit.
	errLineTooLong = errors.New("line or event over the size limit")
	// errCutLine is returned at end of input inside a line: the stream was cut.
	errCutLine = errors.New("stream ends inside a line")
)

// sseReader reads events from a stream. It holds at most max bytes of one
// line and max bytes of one event's data.
type sseReader struct {
	sc      *bufio.Scanner
	max     int
	cut     bool // the last line had no line end
	started bool // the first line was read (a BOM is dropped from it)
	name    string
	data    []byte
	hasData bool
}

func newSSEReader(r io.Reader, max int) *sseReader {
	s := &sseReader{max: max}
	s.sc = bufio.NewScanner(r)
	s.sc.Buffer(make([]byte, 0, min(max, 64<<10)), max+2) // +2: the line end
	s.sc.Split(s.splitLine)
	return s
}

// splitLine is a bufio.SplitFunc for SSE line ends: LF, CRLF or a lone CR.
// A CR at the end of what has arrived so far may be the first half of a
// CRLF, so it waits for one more byte unless the input has ended.
func (s *sseReader) splitLine(data []byte, atEOF bool) (int, []byte, error) {
	i := bytes.IndexAny(data, "\r\n")
	switch {
	case i < 0 && atEOF && len(data) > 0:
		s.cut = true
		return len(data), data, nil
	case i < 0:
		return 0, nil, nil // need more; at EOF with no data Scan ends
	case data[i] == '\n':
		return i + 1, data[:i], nil
	case i+1 < len(data):
		if data[i+1] == '\n' {
			return i + 2, data[:i], nil
		}
		return i + 1, data[:i], nil
	case atEOF:
		return i + 1, data[:i], nil
	}
	return 0, nil, nil
}

// next returns the next event. At the end of input it returns io.EOF, or
// errCutLine when the input ended inside a line; data lines read before
// the end without the blank line that dispatches them are returned as a
// last event first, so that an event is not lost to a missing blank line.
func (s *sseReader) next() (sseEvent, error) {
	for s.sc.Scan() {
		line := s.sc.Bytes()
		if !s.started {
			s.started = true
			line = bytes.TrimPrefix(line, []byte("\xEF\xBB\xBF"))
		}
		if s.cut {
			break // never act on a partial line
		}
		if len(line) > s.max {
			return sseEvent{}, errLineTooLong
		}
		if len(line) == 0 {
			if ev, ok := s.dispatch(); ok {
				return ev, nil
			}
			continue
		}
		if err := s.field(line); err != nil {
			return sseEvent{}, err
		}
	}
	if errors.Is(s.sc.Err(), bufio.ErrTooLong) {
		return sseEvent{}, errLineTooLong
	}
	if err := s.sc.Err(); err != nil {
		return sseEvent{}, err
	}
	if ev, ok := s.dispatch(); ok && !s.cut {
		return ev, nil
	}
	if s.cut {
		return sseEvent{}, errCutLine
	}
	return sseEvent{}, io.EOF
}

// field applies one non-blank line.
func (s *sseReader) field(line []byte) error {
	if line[0] == ':' {
		return nil // comment
	}
	name, value, _ := bytes.Cut(line, []byte(":"))
	value = bytes.TrimPrefix(value, []byte(" "))
	switch string(name) {
	case "event":
		s.name = string(value)
	case "data":
		if s.hasData {
			s.data = append(s.data, '\n')
		}
		if len(s.data)+len(value) > s.max {
			return errLineTooLong
		}
		s.data = append(s.data, value...)
		s.hasData = true
	}
	return nil
}

// dispatch ends the current event: it is returned only if it had data,
// as the format says; either way the next event starts afresh.
func (s *sseReader) dispatch() (sseEvent, bool) {
	ev, ok := sseEvent{Name: s.name, Data: string(s.data)}, s.hasData
	s.name, s.data, s.hasData = "", s.data[:0], false
	return ev, ok
}
