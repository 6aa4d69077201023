package search

import (
	"bufio"
	"bytes"
	"io"
)

// Message is what search reads of one messages.jsonl line.
type Message struct {
	Role string // "user" or "assistant"
	Run  string
	TS   string
	Text string // the content string, or its text parts joined
}

// toolPrefix starts the tool messages the engine records: they are
// skipped without decoding their (often large) results.
var toolPrefix = []byte(`{"role":"tool"`)

// ParseMessage reads a user or assistant message line; ok is false for
// any other line (tool messages, lines that are not JSON). The index and
// the verifying scan both read lines through it, so they agree on what
// the text of a message is.
func ParseMessage(line []byte) (m Message, ok bool) {
	if bytes.HasPrefix(line, toolPrefix) {
		return m, false
	}
	return scanMessage(line)
}

// MaxLine bounds a line the scans read (abi.MaxLineBytes plus its
// newline); a longer line, which no provable log holds, is skipped whole.
const MaxLine = 1<<20 + 1

// EachLine calls fn for every complete line of r[from:to) with the offset
// just past its newline, in order, until fn returns an error. A last line
// without its newline (still being written, or torn) is not read. It
// returns the offset past the last complete line (from when there is
// none): how far the lines were read.
func EachLine(r io.ReaderAt, from, to int64, fn func(line []byte, end int64) error) (int64, error) {
	return EachLineMay(r, from, to, nil, fn)
}

// EachLineMay is EachLine for the lines that may matter: each time the
// reader has read more of r (64 KiB at a time), may is asked about the
// complete lines it holds beyond those already passed or asked about, as
// one block; when it answers false, those lines are skipped, not passed
// to fn. A filter that scans a block at once costs much less than one
// that looks at each line (docs/benchmarks.md, "Search"). may nil asks
// nothing.
func EachLineMay(r io.ReaderAt, from, to int64, may func(block []byte) bool, fn func(line []byte, end int64) error) (int64, error) {
	br := bufio.NewReaderSize(io.NewSectionReader(r, from, to-from), 64<<10)
	var long []byte  // the start of a line longer than the buffer
	tooLong := false // the line being read is over MaxLine: skipped
	start, off := from, from
	asked := from // lines before this offset were asked about
	for {
		if may != nil && long == nil && off >= asked {
			buf, _ := br.Peek(br.Buffered()) // what the reader holds: no read
			if nl := bytes.LastIndexByte(buf, '\n'); nl >= 0 {
				asked = off + int64(nl+1)
				if !may(buf[:nl+1]) {
					br.Discard(nl + 1)
					off, start = asked, asked
				}
			}
		}
		chunk, err := br.ReadSlice('\n')
		off += int64(len(chunk))
		switch err {
		case nil:
			line := chunk
			if long != nil {
				line = append(long, chunk...)
			}
			if !tooLong && len(line) <= MaxLine {
				if err := fn(line[:len(line)-1], off); err != nil {
					return start, err
				}
			}
			long, tooLong, start = nil, false, off
		case bufio.ErrBufferFull:
			tooLong = tooLong || len(long)+len(chunk) > MaxLine
			if !tooLong {
				long = append(long, chunk...)
			}
		case io.EOF:
			return start, nil
		default:
			return start, err
		}
	}
}
