package proto

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
)

// ReadLineWithin's bound counts the line without its newline, whether the
// line ends in one, ends the stream, or spans many reads of a small
// buffer; a line over it is refused without reading the rest.
func TestReadLineWithin(t *testing.T) {
	const limit = 40
	x := func(n int) string { return strings.Repeat("x", n) }
	for _, c := range []struct {
		name, in, want string
		err            error
	}{
		{"at the bound, newline", x(limit) + "\nnext\n", x(limit) + "\n", nil},
		{"at the bound, no newline", x(limit), x(limit), io.EOF},
		{"one over, newline", x(limit+1) + "\n", "", ErrLineTooLong},
		{"one over, no newline", x(limit + 1), "", ErrLineTooLong},
		{"empty line", "\n", "\n", nil},
		{"empty stream", "", "", io.EOF},
	} {
		for _, size := range []int{16, 4096} { // bufio's smallest buffer: the line spans reads
			br := bufio.NewReaderSize(strings.NewReader(c.in), size)
			got, err := ReadLineWithin(br, limit)
			if string(got) != c.want || !errors.Is(err, c.err) {
				t.Errorf("%s (buffer %d): got %q, %v; want %q, %v", c.name, size, got, err, c.want, c.err)
			}
		}
	}
	// A stream with no newline is not read past the bound and a buffer.
	r := &countingReader{}
	if _, err := ReadLineWithin(bufio.NewReaderSize(r, 16), limit); !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("endless line: %v", err)
	}
	if r.n > limit+16 {
		t.Errorf("read %d bytes of an endless line with bound %d", r.n, limit)
	}
	// The next line after one within the bound is read whole.
	br := bufio.NewReader(strings.NewReader(x(limit) + "\nnext\n"))
	ReadLineWithin(br, limit)
	if got, err := ReadLineWithin(br, limit); string(got) != "next\n" || err != nil {
		t.Errorf("second line: %q, %v", got, err)
	}
}

// countingReader is an endless stream of x without a newline.
type countingReader struct{ n int }

func (r *countingReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	r.n += len(p)
	return len(p), nil
}

// ReadLine skips a line over its bound and reads the next.
func TestReadLineSkipsLong(t *testing.T) {
	br := bufio.NewReaderSize(strings.NewReader(strings.Repeat("y", 50)+"\nok\n"), 16)
	if line, tooLong, err := ReadLine(br, 40); !tooLong || line != nil || err != nil {
		t.Fatalf("long line: %q %v %v", line, tooLong, err)
	}
	if line, tooLong, err := ReadLine(br, 40); string(line) != "ok" || tooLong || err != nil {
		t.Fatalf("next line: %q %v %v", line, tooLong, err)
	}
}
