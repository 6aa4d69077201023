// Package search is the full-text index of ctxfs (SPEC 14): substring
// search over the user and assistant text of sessions, in any script.
//
// A session's index is a chain of segments. Each segment covers a byte
// range of messages.jsonl, cut at line ends, and holds a Bloom filter of
// the rune 1-, 2- and 3-grams of the text of the messages in that range,
// case-folded. A query keeps the segments whose filter has all of its own
// n-grams, then verifies those ranges by scanning their messages for the
// folded substring: a Bloom filter never misses what was added, so the
// index never hides a match, and the scan removes its false positives.
//
// The index is derived data: it can always be rebuilt from the log, so it
// is checked (a header checksum, the chain of ranges, a checksum of the
// log bytes each segment ends with) and thrown away when it does not fit.
// This package owns the format, the matching and the segments' storage
// (store.go: the files of a session's index under <home>/.search, their
// locks and checks). It never opens a session's log, never decides which
// sessions a caller may search or at what pace (the engine does, and hands
// it the log), and never imports the engine.
package search

import (
	"sync"
	"unicode"
	"unicode/utf8"
)

// Fold maps r to one representative of its simple case-folding orbit
// (unicode.SimpleFold): the smallest rune in it. Text and queries are
// compared after folding each rune, so "Straße", "STRASSE" are not equal
// (no multi-rune folding) but "ΣΊΣΥΦΟΣ" and "σίσυφος", "K" and "k" (Kelvin
// sign) are. Folding keeps the number of runes, so a match in folded text
// is a match of the same runes in the original.
func Fold(r rune) rune {
	if r < utf8.RuneSelf {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}
	if r < 0x10000 {
		foldOnce.Do(buildFoldBMP)
		return rune(foldBMP[r])
	}
	return foldOrbit(r)
}

// foldOrbit walks r's SimpleFold orbit. For ASCII letters the smallest is
// the upper case one, so Fold uses lower case there instead; the orbit
// of any ASCII letter is then folded to its lower case too.
func foldOrbit(r rune) rune {
	m := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		m = min(m, f)
	}
	if 'A' <= m && m <= 'Z' {
		m += 'a' - 'A'
	}
	return m
}

// foldBMP is Fold for the Basic Multilingual Plane, computed once: a table
// lookup costs less than SimpleFold's binary searches, and CJK text is
// folded rune by rune when indexing.
var (
	foldOnce sync.Once
	foldBMP  []uint16
)

func buildFoldBMP() {
	t := make([]uint16, 0x10000)
	for r := range t {
		f := foldOrbit(rune(r))
		if f >= 0x10000 { // never for a BMP rune; kept correct anyway
			f = rune(r)
		}
		t[r] = uint16(f)
	}
	foldBMP = t
}

// FoldString folds every rune of s. Invalid UTF-8 bytes become U+FFFD, as
// they do when a JSON decoder reads them.
func FoldString(s string) string {
	b := make([]byte, 0, len(s))
	for _, r := range s {
		b = utf8.AppendRune(b, Fold(r))
	}
	return string(b)
}
