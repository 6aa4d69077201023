package sealedlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

// The journal's on-disk format. A journal file ("journal-<gen, 16 hex>")
// is a sequence of batches, one per group commit, each starting on a
// journalAlign boundary, so that the write of a new batch never rewrites
// a block that holds an acknowledged one (a torn write can only tear the
// batch being written):
//
//	header: magic (8) | gen (8) | batch number (8) | token (8) | body length (4) | CRC-32C (4)
//	body:   records
//	        kind (1) | path length (2) | path | binding (32) | offset (8) | data length (4) | data
//	padding to the next journalAlign boundary
//
// The token is the fencing token of the writer host that wrote the batch
// (0: no cluster); a fence (journal_fence.go) decides which tokens' batches
// are history. The CRC covers the header up to it and the body. Batches of
// an older ctxfs ("CTXJRNL1") have no token field (a 32-byte header) and
// are read as token 0. A batch is written whole and then fdatasynced before
// the next one is written, so after a crash only the last batch of the
// newest file can be torn; a bad batch followed by a good one is damage.
const (
	journalMagic     = "CTXJRNL2"
	journalMagicV1   = "CTXJRNL1"
	journalAlign     = 4096
	batchHeaderLen   = 40 // a batch this ctxfs writes
	batchHeaderLenV1 = 32 // a CTXJRNL1 batch
	journalPrefix    = "journal-"
	maxJournalPath   = 4096
)

// Record kinds.
const (
	// recAppend: data was appended to the log at path at offset.
	recAppend byte = 1
	// recRetire: the log at path (bound to bind) was checkpointed at
	// offset (its length) and closed, and may now move or go away: every
	// earlier record of it is settled.
	recRetire byte = 2
	// recIntent: the log at path may hold bytes past its seal and past
	// this journal's records (appends written but not yet durable): replay
	// cuts it back to what the journal holds.
	recIntent byte = 3
	// recValue: the single-value file at path was replaced; data is its
	// owner and content (journal_value.go). recRemove: it was removed.
	recValue  byte = 4
	recRemove byte = 5
)

// jrec is one journal record.
type jrec struct {
	kind byte
	path string
	bind [32]byte
	off  int64
	data []byte
	log  *Log   // the log it is for (in memory only; nil when replaying)
	last uint64 // on the last record of a unit: the unit's number
	owed bool   // an append charged past its log's bound (AppendOwed)
}

func (r *jrec) size() int { return 1 + 2 + len(r.path) + 32 + 8 + 4 + len(r.data) }

// batchSize is the room a batch of body bytes takes in a journal file.
func batchSize(body int) int64 { return alignBatch(batchHeaderLen + body) }

// alignBatch rounds a batch's header and body up to journalAlign.
func alignBatch(n int) int64 {
	return (int64(n) + journalAlign - 1) / journalAlign * journalAlign
}

// encodeBatch lays out one batch of the writer with fencing token token,
// padded, in buf's room when it has enough (the committer reuses one
// buffer).
func encodeBatch(buf []byte, gen, num, token uint64, recs []*jrec) []byte {
	body := 0
	for _, r := range recs {
		body += r.size()
	}
	n := int(batchSize(body))
	b := buf[:0]
	if cap(b) < n {
		b = make([]byte, n)
	}
	b = b[:n]
	clear(b[batchHeaderLen+body:]) // the padding
	copy(b, journalMagic)
	binary.LittleEndian.PutUint64(b[8:], gen)
	binary.LittleEndian.PutUint64(b[16:], num)
	binary.LittleEndian.PutUint64(b[24:], token)
	binary.LittleEndian.PutUint32(b[32:], uint32(body))
	p := b[batchHeaderLen:]
	for _, r := range recs {
		p[0] = r.kind
		binary.LittleEndian.PutUint16(p[1:], uint16(len(r.path)))
		p = p[3:]
		p = p[copy(p, r.path):]
		p = p[copy(p, r.bind[:]):]
		binary.LittleEndian.PutUint64(p, uint64(r.off))
		binary.LittleEndian.PutUint32(p[8:], uint32(len(r.data)))
		p = p[12:]
		p = p[copy(p, r.data):]
	}
	h := batchHeader{hlen: batchHeaderLen, body: body}
	binary.LittleEndian.PutUint32(b[batchHeaderLen-4:], h.sum(b))
	return b
}

// batchHeader is a decoded header, of either format.
type batchHeader struct {
	gen, num, token uint64
	hlen            int // the header's length: batchHeaderLen, or batchHeaderLenV1
	body            int
	crc             uint32
}

// decodeHeader decodes the header at the start of b (which holds up to
// batchHeaderLen bytes; a CTXJRNL1 header needs only batchHeaderLenV1).
func decodeHeader(b []byte) (batchHeader, bool) {
	switch {
	case len(b) >= batchHeaderLen && string(b[:8]) == journalMagic:
		return batchHeader{
			gen:   binary.LittleEndian.Uint64(b[8:]),
			num:   binary.LittleEndian.Uint64(b[16:]),
			token: binary.LittleEndian.Uint64(b[24:]),
			hlen:  batchHeaderLen,
			body:  int(binary.LittleEndian.Uint32(b[32:])),
			crc:   binary.LittleEndian.Uint32(b[36:]),
		}, true
	case len(b) >= batchHeaderLenV1 && string(b[:8]) == journalMagicV1:
		return batchHeader{
			gen:  binary.LittleEndian.Uint64(b[8:]),
			num:  binary.LittleEndian.Uint64(b[16:]),
			hlen: batchHeaderLenV1,
			body: int(binary.LittleEndian.Uint32(b[24:])),
			crc:  binary.LittleEndian.Uint32(b[28:]),
		}, true
	}
	return batchHeader{}, false
}

// size is the room the batch takes in its file.
func (h batchHeader) size() int64 { return alignBatch(h.hlen + h.body) }

// sum is the CRC of the batch in b: the header up to the CRC, and the body.
func (h batchHeader) sum(b []byte) uint32 {
	return crc32.Update(crc32.Checksum(b[:h.hlen-4], castagnoli), castagnoli, b[h.hlen:h.hlen+h.body])
}

// check verifies a whole batch (header and body) read into b.
func (h batchHeader) check(b []byte) bool {
	return len(b) >= h.hlen+h.body && h.sum(b) == h.crc
}

var errBadRecord = errors.New("malformed record")

// decodeRecords parses a verified body. A body whose CRC holds but whose
// records do not parse was written by something else: damage.
func decodeRecords(body []byte) ([]*jrec, error) {
	var out []*jrec
	for len(body) > 0 {
		if len(body) < 3 {
			return nil, errBadRecord
		}
		r := &jrec{kind: body[0]}
		n := int(binary.LittleEndian.Uint16(body[1:]))
		body = body[3:]
		if r.kind < recAppend || r.kind > recRemove || n == 0 || n > maxJournalPath || len(body) < n+32+12 {
			return nil, errBadRecord
		}
		r.path = string(body[:n])
		copy(r.bind[:], body[n:n+32])
		body = body[n+32:]
		r.off = int64(binary.LittleEndian.Uint64(body))
		dl := int(binary.LittleEndian.Uint32(body[8:]))
		body = body[12:]
		if r.off < 0 || dl > len(body) || (r.kind != recAppend && r.kind != recValue && dl != 0) {
			return nil, errBadRecord
		}
		r.data = body[:dl:dl]
		body = body[dl:]
		out = append(out, r)
	}
	return out, nil
}

// journalName is the file name of generation gen; parseJournalName its
// inverse.
func journalName(gen uint64) string { return fmt.Sprintf("%s%016x", journalPrefix, gen) }

func parseJournalName(name string) (uint64, bool) {
	hex, ok := strings.CutPrefix(name, journalPrefix)
	if !ok || len(hex) != 16 {
		return 0, false
	}
	g, err := strconv.ParseUint(hex, 16, 64)
	return g, err == nil
}

// IsJournalName reports whether name is a journal file's name (fsck's
// walk of the server's own directory knows it).
func IsJournalName(name string) bool {
	_, ok := parseJournalName(name)
	return ok
}
