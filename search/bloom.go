package search

import "math/bits"

// Filter is a split block Bloom filter (as Parquet's): blocks of eight
// 32-bit words; a key sets one bit in each word of one block. All eight
// probes of a key fall in 32 bytes, so testing a key in a filter on disk
// reads one block, not the whole filter.
type Filter struct {
	words  []uint32    // 8 per block
	set    int         // bits set, for Full
	recent [256]uint64 // keys added last, by their low bits: text repeats its n-grams
}

// Block counts: a segment is built at MaxBlocks (512 KiB) and stored
// folded to the fewest blocks, at least MinBlocks, that keep it at most
// half full (most sessions are small). A query opens every segment file,
// and an open through storefs costs several system calls: fewer, larger
// segments answer faster, and building them is no slower.
const (
	MinBlocks = 16
	MaxBlocks = 16384
)

// blockBytes is the size of one block.
const blockBytes = 32

// salts spread a key's 32 low bits over the eight words (Parquet's).
var salts = [8]uint32{0x47b6137b, 0x44974d91, 0x8824ad5b, 0xa2b7289d, 0x705495c7, 0x2df1424b, 0x9efc4947, 0x5c6bfb31}

// NewFilter makes an empty filter of n blocks (a power of two).
func NewFilter(n int) *Filter { return &Filter{words: make([]uint32, 8*n)} }

// Blocks is the number of blocks.
func (f *Filter) Blocks() int { return len(f.words) / 8 }

// block is the index of key's block: the key's high bits.
func block(key uint64, blocks int) int { return int((key >> 32) & uint64(blocks-1)) }

// mask is the bit key sets in word i of its block.
func mask(key uint64, i int) uint32 { return 1 << ((uint32(key) * salts[i]) >> 27) }

// Add adds key. It counts the bits it sets without a branch per bit: the
// index adds three keys per rune of text.
func (f *Filter) Add(key uint64) {
	if f.recent[key&255] == key && key != 0 { // 0: an empty slot, not a key
		return
	}
	f.recent[key&255] = key
	w := (*[8]uint32)(f.words[8*block(key, f.Blocks()):])
	k := uint32(key)
	n := 0
	for i := range w {
		m := uint32(1) << ((k * salts[i]) >> 27)
		n += bits.OnesCount32(^w[i] & m)
		w[i] |= m
	}
	f.set += n
}

// Has reports whether key may have been added (never false for a key
// that was).
func (f *Filter) Has(key uint64) bool {
	return blockHas(f.words[8*block(key, f.Blocks()):][:8], key)
}

func blockHas(w []uint32, key uint64) bool {
	for i := range w {
		if w[i]&mask(key, i) == 0 {
			return false
		}
	}
	return true
}

// Full reports whether half the bits are set: beyond that the chance that
// a key not added passes (about the fill to the eighth power, 0.4% at
// one half) grows fast.
func (f *Filter) Full() bool { return 2*f.set > 32*len(f.words) }

// fold is f with half the blocks: block i of the result is blocks i and
// i+n/2 of f together, which is where a key's block lands with one bit
// of block index less. What f holds, the result holds.
func (f *Filter) fold() *Filter {
	half := len(f.words) / 2
	g := &Filter{words: make([]uint32, half)}
	for i := range g.words {
		g.words[i] = f.words[i] | f.words[i+half]
	}
	g.recount()
	return g
}

// compact is f folded as long as it stays at most half full, down to
// MinBlocks: how a segment is stored.
func (f *Filter) compact() *Filter {
	for f.Blocks() > MinBlocks {
		g := f.fold()
		if g.Full() {
			break
		}
		f = g
	}
	return f
}

// recount sets f.set from the words (after decoding).
func (f *Filter) recount() {
	f.set = 0
	for _, w := range f.words {
		f.set += bits.OnesCount32(w)
	}
}
