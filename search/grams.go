package search

// The index holds every rune 1-, 2- and 3-gram of the folded text, so that
// a query of any length has n-grams to look up: its 3-grams, or for one or
// two runes the query itself. Runes are at most 21 bits, so an n-gram
// packs into 63 bits (right-aligned), and the n in the hash keeps a
// 1-gram apart from a 3-gram that would pack the same.

// gramKey is the filter key of an n-gram of folded runes a, b, c (the last
// n of them count).
func gramKey(a, b, c rune, n int) uint64 {
	x := uint64(a)<<42 | uint64(b)<<21 | uint64(c)
	return mix(x + uint64(n)*0x9e3779b97f4a7c15)
}

// mix is SplitMix64's finalizer: every input bit moves about half the
// output bits, so the block index (high bits) and the probes (low bits)
// are independent enough.
func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// addText adds the n-grams of text, folded, to f.
func addText(f *Filter, text string) {
	var p1, p2 rune // the two runes before r
	n := 0
	for _, r := range text {
		r = Fold(r)
		f.Add(gramKey(0, 0, r, 1))
		if n >= 1 {
			f.Add(gramKey(0, p1, r, 2))
		}
		if n >= 2 {
			f.Add(gramKey(p2, p1, r, 3))
		}
		p2, p1 = p1, r
		n++
	}
}

// maxQueryKeys bounds the keys a query looks up in each segment: any
// subset of its n-grams is a sound filter (a matching segment has them
// all), and beyond a few dozen more keys hardly lower false positives.
const maxQueryKeys = 32

// queryKeys are the keys a segment holding a match of the folded runes q
// must have: all 3-grams (at most maxQueryKeys, spread over q), or the
// one n-gram of a query of one or two runes.
func queryKeys(q []rune) []uint64 {
	switch len(q) {
	case 0:
		return nil
	case 1:
		return []uint64{gramKey(0, 0, q[0], 1)}
	case 2:
		return []uint64{gramKey(0, q[0], q[1], 2)}
	}
	seen := map[uint64]bool{}
	var keys []uint64
	grams := len(q) - 2
	step := max(1, grams/maxQueryKeys)
	for i := 0; i < grams && len(keys) < maxQueryKeys; i += step {
		k := gramKey(q[i], q[i+1], q[i+2], 3)
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	return keys
}
