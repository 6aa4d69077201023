package search

import "unsafe"

// linearQuery finds a folded query in time linear in the text, whatever
// the text and the query hold (Knuth, Morris and Pratt: no byte of the
// text is read twice). It is the fallback wherever a faster search can be
// made slow by crafted text: asciiQuery's comparisons at each anchor, and
// strings.Index for a query longer than its brute force takes
// (longQueryBytes), whose Rabin-Karp hash is fixed, so that a query and a
// text can be made whose windows all collide with it, each then compared
// in full (docs/benchmarks.md, "A query's linear fallback").
type linearQuery struct {
	q      []byte // the folded query (folded text holds no upper-case ASCII)
	border []int  // border[i]: the longest proper border of q[:i+1]
}

// longQueryBytes: strings.Index compares a query of up to this many bytes
// by brute force in vector registers (bytealg.MaxLen is 63 with AVX2),
// whose cost a query's length bounds; a longer one goes to Rabin-Karp.
const longQueryBytes = 63

func newLinearQuery(folded string) linearQuery {
	q := []byte(folded)
	return linearQuery{q: q, border: borders(q)}
}

// index is the byte offset of the first match in folded text, or -1.
func (l *linearQuery) index(folded string) int {
	at := -1
	l.scan(unsafe.Slice(unsafe.StringData(folded), len(folded)), 0, func(i int) bool { at = i; return false })
	return at
}

// scan calls fn with the offset of each match in b that starts at from or
// after, ignoring ASCII case, in order, until fn returns false.
func (l *linearQuery) scan(b []byte, from int, fn func(i int) bool) {
	k := 0 // bytes of l.q matched before b[i]
	for i := from; i < len(b); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		for k > 0 && l.q[k] != c {
			k = l.border[k-1]
		}
		if l.q[k] == c {
			k++
		}
		if k == len(l.q) {
			if !fn(i + 1 - k) {
				return
			}
			k = l.border[k-1]
		}
	}
}

// borders is scan's table of q: for each prefix q[:i+1], the length of
// its longest proper prefix that is also its suffix.
func borders(q []byte) []int {
	t := make([]int, len(q))
	k := 0
	for i := 1; i < len(q); i++ {
		for k > 0 && q[i] != q[k] {
			k = t[k-1]
		}
		if q[i] == q[k] {
			k++
		}
		t[i] = k
	}
	return t
}
