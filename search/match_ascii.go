package search

import (
	"bytes"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// asciiQuery is MayHold's test for a plain query of ASCII runes: a search
// of the raw line for its bytes, ignoring ASCII case, that neither
// decodes nor folds the line. Folding the whole line (the general test)
// was most of the time of a query that reaches it, and a Latin query
// reaches it on almost every line: its letters are in the keys, run ids
// and time stamps of any line (docs/benchmarks.md, "Search").
//
// The test is exact up to case for text held as one JSON string: an ASCII
// rune of the query is in the line as its byte, in either case, unless a
// \u escape spells it (MayHold answers true for those lines first), and a
// byte of a multi-byte rune is never an ASCII byte. Two non-ASCII runes fold
// to ASCII letters (U+212A KELVIN SIGN to k, U+017F LATIN SMALL LETTER LONG
// S to s); a line holding one of those the query could need (exotic) goes
// to the general test.
type asciiQuery struct {
	linearQuery          // the folded query (q: lower-case ASCII), and its linear search
	anchor      int      // the index in q of the byte looked for first
	exotic      [][]byte // the UTF-8 of the non-ASCII runes that fold into q
}

// find is the byte offset of the first match of a in text, or -1; ok is
// false when text holds a rune that folds into the query (exotic), which
// only the general match finds.
func (a *asciiQuery) find(text string) (i int, ok bool) {
	b := unsafe.Slice(unsafe.StringData(text), len(text)) // only read
	if containsAny(b, a.exotic) {
		return -1, false
	}
	return a.index(b), true
}

// newASCIIQuery is the test for folded, or nil when folded is not all
// ASCII.
func newASCIIQuery(folded string) *asciiQuery {
	for i := 0; i < len(folded); i++ {
		if folded[i] >= utf8.RuneSelf {
			return nil
		}
	}
	a := &asciiQuery{linearQuery: newLinearQuery(folded)}
	for i := range a.q {
		if rarity(a.q[i]) > rarity(a.q[a.anchor]) {
			a.anchor = i
		}
	}
	if strings.IndexByte(folded, 'k') >= 0 {
		a.exotic = append(a.exotic, []byte("\u212a"))
	}
	if strings.IndexByte(folded, 's') >= 0 {
		a.exotic = append(a.exotic, []byte("\u017f"))
	}
	return a
}

// byFrequency is about how often bytes occur in messages.jsonl lines of
// mostly English text, most frequent first: the letters of English text,
// and ahead of them the bytes every line holds (keys, quotes, hex run
// ids, time stamps). A byte not listed is rarer than all of them.
const byFrequency = ` "etaoinsr:,01234567892-cdfbhlumTZ{}pgwyvkxjqz`

// rarity ranks b: higher is rarer (a better byte to look for first).
func rarity(b byte) int {
	if i := strings.IndexByte(byFrequency, b); i >= 0 {
		return i
	}
	return len(byFrequency)
}

// index is the index of the first a.q in b, ignoring ASCII case, or -1.
func (a *asciiQuery) index(b []byte) int {
	at := -1
	a.each(b, func(i int) bool { at = i; return false })
	return at
}

// each calls fn with the index of each a.q in b, ignoring ASCII case, in
// order, until fn returns false. It looks for the anchor byte in both its
// cases (each with bytes.IndexByte, which scans many bytes at a time,
// and each stream read once: a case that is not there is looked for
// once, not at every match) and compares the query around each one.
//
// A comparison costs up to the query's length, and a hostile line can
// hold the anchor at every byte with the query failing at its last
// ("q"×1023 "e" in a line of "q"s: 1.7 s a MiB, a scan slot held all
// along): once the comparisons have cost more than four times the bytes
// passed (never, for a query of up to 4 bytes), the rest of b is searched
// by linearQuery, whose cost is b's length.
func (a *asciiQuery) each(b []byte, fn func(i int) bool) {
	n := len(a.q)
	if len(b) < n {
		return
	}
	compared := 0 // bytes compared around anchors
	lo := a.q[a.anchor]
	up := upperASCII(lo)
	last := len(b) - n + a.anchor // the anchor's last possible place
	nextLo, nextUp := indexFrom(b, lo, a.anchor), -1
	if up != lo {
		nextUp = indexFrom(b, up, a.anchor)
	}
	for {
		p := nextLo
		if p < 0 || (nextUp >= 0 && nextUp < p) {
			p = nextUp
		}
		if p < 0 || p > last {
			return
		}
		if compared += n; compared > 4*(p+64) {
			a.scan(b, p-a.anchor, fn) // every match before p-a.anchor was found
			return
		}
		if equalFoldASCII(b[p-a.anchor:p-a.anchor+n], a.q) && !fn(p-a.anchor) {
			return
		}
		if p == nextLo {
			nextLo = indexFrom(b, lo, p+1)
		} else {
			nextUp = indexFrom(b, up, p+1)
		}
	}
}

// indexFrom is the index of the first c in b at from or after, or -1.
func indexFrom(b []byte, c byte, from int) int {
	if from >= len(b) {
		return -1
	}
	if i := bytes.IndexByte(b[from:], c); i >= 0 {
		return from + i
	}
	return -1
}

func upperASCII(c byte) byte {
	if 'a' <= c && c <= 'z' {
		return c - ('a' - 'A')
	}
	return c
}

// equalFoldASCII: s equals q (lower-case ASCII) after lowering s's ASCII
// letters.
func equalFoldASCII(s, q []byte) bool {
	for i, c := range s {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != q[i] {
			return false
		}
	}
	return true
}
