package search

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"sync"
)

// Segment is one piece of a session's index: the filter of the messages
// in messages.jsonl[Start:End).
type Segment struct {
	Ident  [16]byte // the session's identity (its random id): another session's index never fits
	Start  int64
	End    int64  // at a line end
	Tail   uint32 // TailSum of the log at End: a log replaced behind the index no longer fits
	Closed bool   // full: what follows goes to the next segment
	Filter *Filter
}

// NewSegment is an empty segment starting at start.
func NewSegment(ident [16]byte, start int64) *Segment {
	return &Segment{Ident: ident, Start: start, End: start, Filter: NewFilter(MaxBlocks)}
}

// MaxSegmentBytes bounds the range of messages.jsonl a segment covers:
// a query scans a candidate segment's whole range, and widening a stored
// segment re-reads it (see Extend). Text with few distinct n-grams
// (English) reaches it before the filter fills; CJK text fills the filter
// first, at about 500 KiB.
const MaxSegmentBytes = 1 << 20

// The file of a segment, little-endian:
//
//	0  magic "CTXSRCH1"     8
//	8  ident               16
//	24 start, end         8+8
//	40 tail                 4
//	44 blocks               4
//	48 CRC-32C of the bits  4
//	52 flags                1  (1: closed)
//	53 zero                 7
//	60 CRC-32C of bytes 0-59
//	64 the filter's blocks, 32 bytes each
//
// The header has its own checksum so that a query can trust it after
// reading 64 bytes and then read only the blocks its keys fall in; the
// bits' checksum is checked when the whole file is read (DecodeSegment):
// by the engine once per version of a file, and before extending it.
const (
	HeaderSize = 64
	magic      = "CTXSRCH1"
)

// MaxFileSize bounds a segment file.
const MaxFileSize = HeaderSize + MaxBlocks*blockBytes

// castagnoli is made on first use: ctx imports this package to highlight
// matches and should not pay for the table at every start.
var castagnoli = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

// ErrBadSegment is what a segment file that does not parse is.
var ErrBadSegment = errors.New("not a valid search index segment")

// Encode is the segment's file, its filter folded (Filter.compact).
func (s *Segment) Encode() []byte {
	f := s.Filter.compact()
	bits := make([]byte, 4*len(f.words))
	for i, w := range f.words {
		binary.LittleEndian.PutUint32(bits[4*i:], w)
	}
	h := s.Header()
	h.Blocks, h.bitsSum = f.Blocks(), crc32.Checksum(bits, castagnoli())
	return append(h.encode(), bits...)
}

// Header is a segment file's header.
type Header struct {
	Ident      [16]byte
	Start, End int64
	Tail       uint32
	Closed     bool
	Blocks     int
	bitsSum    uint32
}

func (h Header) encode() []byte {
	b := make([]byte, HeaderSize)
	copy(b, magic)
	copy(b[8:], h.Ident[:])
	binary.LittleEndian.PutUint64(b[24:], uint64(h.Start))
	binary.LittleEndian.PutUint64(b[32:], uint64(h.End))
	binary.LittleEndian.PutUint32(b[40:], h.Tail)
	binary.LittleEndian.PutUint32(b[44:], uint32(h.Blocks))
	binary.LittleEndian.PutUint32(b[48:], h.bitsSum)
	if h.Closed {
		b[52] = 1
	}
	binary.LittleEndian.PutUint32(b[60:], crc32.Checksum(b[:60], castagnoli()))
	return b
}

// ParseHeader reads a segment's header; size is the file's size, which
// must be what the header says.
func ParseHeader(b []byte, size int64) (Header, error) {
	var h Header
	if len(b) < HeaderSize || string(b[:8]) != magic ||
		binary.LittleEndian.Uint32(b[60:]) != crc32.Checksum(b[:60], castagnoli()) {
		return h, ErrBadSegment
	}
	copy(h.Ident[:], b[8:24])
	h.Start = int64(binary.LittleEndian.Uint64(b[24:]))
	h.End = int64(binary.LittleEndian.Uint64(b[32:]))
	h.Tail = binary.LittleEndian.Uint32(b[40:])
	h.Blocks = int(binary.LittleEndian.Uint32(b[44:]))
	h.bitsSum = binary.LittleEndian.Uint32(b[48:])
	h.Closed = b[52] == 1
	ok := b[52] <= 1 && h.Blocks >= MinBlocks && h.Blocks <= MaxBlocks && h.Blocks&(h.Blocks-1) == 0 &&
		h.Start >= 0 && h.Start <= h.End && size == HeaderSize+int64(h.Blocks)*blockBytes
	if !ok {
		return h, ErrBadSegment
	}
	return h, nil
}

// DecodeSegment reads a whole segment file, its bits' checksum included.
func DecodeSegment(b []byte) (*Segment, error) {
	h, err := ParseHeader(b, int64(len(b)))
	if err != nil {
		return nil, err
	}
	bits := b[HeaderSize:]
	if crc32.Checksum(bits, castagnoli()) != h.bitsSum {
		return nil, ErrBadSegment
	}
	f := NewFilter(h.Blocks)
	for i := range f.words {
		f.words[i] = binary.LittleEndian.Uint32(bits[4*i:])
	}
	f.recount()
	return &Segment{Ident: h.Ident, Start: h.Start, End: h.End, Tail: h.Tail, Closed: h.Closed, Filter: f}, nil
}

// Header is the header of s's file.
func (s *Segment) Header() Header {
	return Header{Ident: s.Ident, Start: s.Start, End: s.End, Tail: s.Tail, Closed: s.Closed, Blocks: s.Filter.Blocks()}
}

// Probe reports whether the segment file r (whose header is h) may hold
// every key: it reads the one block of each key.
func (h Header) Probe(r io.ReaderAt, keys []uint64) (bool, error) {
	var blk [blockBytes]byte
	var w [8]uint32
	for _, k := range keys {
		off := HeaderSize + int64(block(k, h.Blocks))*blockBytes
		if _, err := r.ReadAt(blk[:], off); err != nil {
			return false, err
		}
		for i := range w {
			w[i] = binary.LittleEndian.Uint32(blk[4*i:])
		}
		if !blockHas(w[:], k) {
			return false, nil
		}
	}
	return true, nil
}

// probeBytes is Probe of a segment file read whole into b (its size
// checked when it was read).
func (h Header) probeBytes(b []byte, keys []uint64) bool {
	var w [8]uint32
	for _, k := range keys {
		blk := b[HeaderSize+block(k, h.Blocks)*blockBytes:][:blockBytes]
		for i := range w {
			w[i] = binary.LittleEndian.Uint32(blk[4*i:])
		}
		if !blockHas(w[:], k) {
			return false
		}
	}
	return true
}

// HasAll reports whether the segment's filter may hold every key.
func (s *Segment) HasAll(keys []uint64) bool {
	for _, k := range keys {
		if !s.Filter.Has(k) {
			return false
		}
	}
	return true
}

// tailBytes is how much of the log TailSum reads.
const tailBytes = 64

// TailSum is the CRC-32C of the (at most) 64 bytes of log before end,
// not before start: what a segment remembers of the bytes it ends with.
func TailSum(log io.ReaderAt, start, end int64) (uint32, error) {
	from := max(start, end-tailBytes)
	b := make([]byte, end-from)
	if _, err := log.ReadAt(b, from); err != nil {
		return 0, err
	}
	return crc32.Checksum(b, castagnoli()), nil
}

// Fits reports whether the segment with header h belongs to this log: the
// session's identity, a range within the log's size, and the same bytes
// before its end as when it was written (a log replaced or cut behind the
// index does not fit, and its index is rebuilt).
func (h Header) Fits(log io.ReaderAt, ident [16]byte, size int64) bool {
	if h.Ident != ident || h.End > size {
		return false
	}
	if h.End == h.Start {
		return true
	}
	sum, err := TailSum(log, h.Start, h.End)
	return err == nil && sum == h.Tail
}

// Extend indexes the complete lines of log[s.End:size) into s (which must
// not be Closed). A segment closes when its filter is more than half full
// at MaxBlocks, or it covers MaxSegmentBytes: full is then given it (Tail
// set) and indexing goes on in a new segment from its end. It returns the
// last segment, Tail set.
//
// A segment is built at MaxBlocks and stored folded. Folding is exact for
// what is added later (a key's block at half the width is its block with
// one bit less), so a stored segment takes new lines at its folded width.
// Only when it is more than half full there is it widened: rebuilt at
// MaxBlocks from its range of the log (which half of a folded block a key
// came from is lost). The segments are the same whether a log is indexed
// at once or in steps.
func Extend(log io.ReaderAt, s *Segment, size int64, full func(*Segment) error) (*Segment, error) {
	_, err := EachLine(log, s.End, size, func(line []byte, end int64) error {
		addLine(s.Filter, line)
		s.End = end
		if s.Filter.Full() && s.Filter.Blocks() < MaxBlocks {
			if err := s.rebuild(log); err != nil {
				return err
			}
		}
		if !s.Filter.Full() && s.End-s.Start < MaxSegmentBytes {
			return nil
		}
		if err := s.seal(log, full); err != nil {
			return err
		}
		s = NewSegment(s.Ident, s.End)
		return nil
	})
	if err == nil {
		err = s.setTail(log)
	}
	return s, err
}

// seal closes s and hands it to full.
func (s *Segment) seal(log io.ReaderAt, full func(*Segment) error) error {
	if err := s.setTail(log); err != nil {
		return err
	}
	s.Closed = true
	return full(s)
}

func (s *Segment) setTail(log io.ReaderAt) error {
	if s.End == s.Start {
		s.Tail = 0
		return nil
	}
	sum, err := TailSum(log, s.Start, s.End)
	s.Tail = sum
	return err
}

// rebuild makes s's filter again at MaxBlocks from its range of the log.
func (s *Segment) rebuild(log io.ReaderAt) error {
	f := NewFilter(MaxBlocks)
	_, err := EachLine(log, s.Start, s.End, func(line []byte, _ int64) error {
		addLine(f, line)
		return nil
	})
	s.Filter = f
	return err
}

// addLine adds the text of a message line, if it is one.
func addLine(f *Filter, line []byte) {
	if m, ok := ParseMessage(line); ok {
		addText(f, m.Text)
	}
}
