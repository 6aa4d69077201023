package sealedlog

import (
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
)

// The seal file is two fixed slots. A record is rewritten in the slot that
// does not hold the latest one, so a crash in the middle of a seal write
// tears at most the slot being written: its CRC fails and the other slot,
// untouched, still vouches for the log.
//
// A record carries an HMAC-SHA256, keyed with the store's seal key (Key),
// of everything it claims: seq, length, committed, digest, hash state and
// binding. Everything else in a record can be recomputed by anyone who can
// read the log; the MAC cannot without the key, which no user can reach.
// The CRC covers the MAC too: a torn slot reads as torn, not as forged.
const (
	slotSize     = 512
	sealSize     = 2 * slotSize
	sealMagic    = "CTXSEAL3"
	unkeyedMagic = "CTXSEAL2"   // before records carried a MAC; same layout, zeros where the MAC is
	oldMagic     = "CTXSEAL1"   // before records carried their binding
	stateMax     = 256          // room for a marshalled sha256 state (108 bytes today)
	crcOffset    = slotSize - 4 // the CRC covers everything before it
	stateStart   = 8 + 8 + 8 + 1 + 32 + 2
	bindStart    = 320            // after the state's room
	macStart     = bindStart + 32 // the MAC covers everything before it
	macEnd       = macStart + sha256.Size
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// record is one seal slot: "the log's first length bytes hash to digest",
// plus the hash state at that length so appends resume without re-reading
// the log. committed is false for an append's intent record, written before
// the data: until the next record, those bytes may not all be on disk.
// bind ties the record to one log of one session (Binding).
type record struct {
	seq       uint64
	length    int64
	committed bool
	digest    [sha256.Size]byte
	state     []byte
	bind      [32]byte
}

// encode lays the record out as one slot: magic, seq, length, committed,
// digest, state length, state, zero padding, binding, MAC under key,
// zero padding, CRC-32C.
func (r *record) encode(key *Key) []byte {
	b := r.layout(sealMagic)
	copy(b[macStart:], key.mac(b[:macStart]))
	binary.LittleEndian.PutUint32(b[crcOffset:], crc32.Checksum(b[:crcOffset], castagnoli))
	return b
}

// layout is the record's fields under magic, without MAC or CRC: the part
// both formats share.
func (r *record) layout(magic string) []byte {
	b := make([]byte, slotSize)
	copy(b, magic)
	binary.LittleEndian.PutUint64(b[8:], r.seq)
	binary.LittleEndian.PutUint64(b[16:], uint64(r.length))
	if r.committed {
		b[24] = 1
	}
	copy(b[25:], r.digest[:])
	binary.LittleEndian.PutUint16(b[57:], uint16(len(r.state)))
	copy(b[stateStart:], r.state)
	copy(b[bindStart:], r.bind[:])
	return b
}

// errForged marks a slot that is whole (its CRC holds) but was not written
// by a server holding this store's key: a record made by someone else, or
// by another store. judge names it as such.
var errForged = errors.New("does not verify under the store's seal key")

// errNoKey marks a keyed slot read without the store's key: the key file
// is gone, so no seal can be checked. The log is refused as a forged one
// is (forged), and fsck names the key rather than the seal.
var errNoKey = fmt.Errorf("it is keyed, and the store has no %s to check it with (restore the key from a backup before a server starts: a start without it makes a new key, under which no record verifies)", KeyFile)

// decodeRecord parses one slot, or says why it is not a valid record: a
// keyed record whose MAC holds under key, or, while key accepts them (a
// store being migrated), an unkeyed one (decodeUnkeyed). Beyond the CRC
// and the MAC it checks that the state hashes to the digest, so a record
// whose state is used to resume hashing is known to describe the same
// content.
func decodeRecord(b []byte, key *Key) (*record, error) {
	if len(b) < slotSize {
		return nil, fmt.Errorf("missing")
	}
	magic := string(b[:8])
	switch {
	case magic == oldMagic:
		return nil, fmt.Errorf("format %s of an older ctxfs, which did not bind a seal to its session", oldMagic)
	case magic == unkeyedMagic && key.acceptsUnkeyed():
		return decodeUnkeyed(b)
	case magic != sealMagic && magic != unkeyedMagic && allZero(b[:slotSize]):
		return nil, fmt.Errorf("empty")
	case magic != sealMagic && magic != unkeyedMagic:
		return nil, fmt.Errorf("bad magic")
	}
	if !crcHolds(b) {
		return nil, fmt.Errorf("checksum mismatch")
	}
	switch {
	case magic == unkeyedMagic:
		return nil, fmt.Errorf("%w: an unkeyed record (format %s of an older ctxfs) in a store whose seals are keyed", errForged, unkeyedMagic)
	case !key.hasSecret():
		return nil, errNoKey
	case !key.verifies(b[:macStart], b[macStart:macEnd]):
		return nil, errForged
	}
	return decodeFields(b)
}

// decodeUnkeyed parses a slot in the format before seals were keyed
// (CTXSEAL2): what the store's migration reads (Rekey), and fsck of a
// store not yet migrated. It proves only that the slot is whole.
func decodeUnkeyed(b []byte) (*record, error) {
	if !crcHolds(b) {
		return nil, fmt.Errorf("checksum mismatch")
	}
	return decodeFields(b)
}

func crcHolds(b []byte) bool {
	return crc32.Checksum(b[:crcOffset], castagnoli) == binary.LittleEndian.Uint32(b[crcOffset:])
}

// decodeFields reads the fields both formats share, once the slot is known
// to be whole and authentic.
func decodeFields(b []byte) (*record, error) {
	r := &record{
		seq:       binary.LittleEndian.Uint64(b[8:]),
		length:    int64(binary.LittleEndian.Uint64(b[16:])),
		committed: b[24] == 1,
	}
	n := int(binary.LittleEndian.Uint16(b[57:]))
	if b[24] > 1 || r.length < 0 || n > stateMax {
		return nil, fmt.Errorf("bad fields")
	}
	copy(r.digest[:], b[25:57])
	copy(r.bind[:], b[bindStart:])
	r.state = append([]byte(nil), b[stateStart:stateStart+n]...)
	h, err := resumeHash(r.state)
	if err != nil || [sha256.Size]byte(h.Sum(nil)) != r.digest {
		return nil, fmt.Errorf("hash state does not match digest")
	}
	return r, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// resumeHash rebuilds a running SHA-256 from its marshalled state.
func resumeHash(state []byte) (hash.Hash, error) {
	h := sha256.New()
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(state); err != nil {
		return nil, err
	}
	return h, nil
}

// hashState marshals a running SHA-256 so a record can carry it.
func hashState(h hash.Hash) []byte {
	b, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		panic("sealedlog: sha256 state does not marshal: " + err.Error()) // cannot happen with crypto/sha256
	}
	return b
}

// newRecord vouches for length bytes whose running hash is h, for the log
// bind names.
func newRecord(seq uint64, length int64, committed bool, h hash.Hash, bind [32]byte) *record {
	return &record{seq: seq, length: length, committed: committed, digest: [sha256.Size]byte(h.Sum(nil)), state: hashState(h), bind: bind}
}

// sealState is what a seal file holds: the latest valid record, the one
// before it when that is still readable, and why each slot was refused.
type sealState struct {
	latest, prev *record
	slotErr      [2]error
}

// forged says why the seal holds a slot that is whole but not written
// under the store's key ("" when none does): such a slot was written by
// someone else, so the seal proves nothing, whatever the other slot says.
func (s *sealState) forged() string {
	for i, err := range s.slotErr {
		if errors.Is(err, errForged) || errors.Is(err, errNoKey) {
			return fmt.Sprintf("slot %d %v", i, err)
		}
	}
	return ""
}

// keyless reports whether the seal was read without the store's key.
func (s *sealState) keyless() bool {
	return errors.Is(s.slotErr[0], errNoKey) || errors.Is(s.slotErr[1], errNoKey)
}

// readSeal reads both slots, verified under key. A short or torn seal is
// not an error here: it shows up as slots without records, and the caller
// decides what that means.
func readSeal(f *os.File, key *Key) (*sealState, error) {
	b := make([]byte, sealSize)
	n, err := f.ReadAt(b, 0)
	if err != nil && err != io.EOF {
		return nil, err
	}
	var s sealState
	var recs [2]*record
	for i := range recs {
		if n < (i+1)*slotSize {
			s.slotErr[i] = fmt.Errorf("missing")
			continue
		}
		recs[i], s.slotErr[i] = decodeRecord(b[i*slotSize:(i+1)*slotSize], key)
	}
	s.latest, s.prev = recs[0], recs[1]
	if s.prev != nil && (s.latest == nil || s.prev.seq > s.latest.seq) {
		s.latest, s.prev = s.prev, s.latest
	}
	if s.prev != nil && s.prev.seq+1 != s.latest.seq {
		s.prev = nil // a stale slot vouches for nothing
	}
	return &s, nil
}

// writeRecord puts r, keyed with key, into its slot (seq mod 2) and
// fdatasyncs the seal: when it returns nil, the record survives a crash.
func writeRecord(f *os.File, r *record, key *Key) error {
	if _, err := f.WriteAt(r.encode(key), int64(r.seq%2)*slotSize); err != nil {
		return err
	}
	return fdatasync(f)
}
