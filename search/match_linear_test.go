package search

import (
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestLongQueryFindsWhatIndexFinds: a query over longQueryBytes is found
// by linearQuery where strings.Index finds it in the folded text, in
// texts made to hold the query, near misses of it and overlapping copies.
func TestLongQueryFindsWhatIndexFinds(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", "A", "量", "É", "é", "\"", "ſ", "K"}
	word := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	for range 2000 {
		query := word(40 + rng.IntN(40))
		q := NewQuery(query)
		if q.long == nil {
			continue
		}
		miss := []rune(query)
		miss[rng.IntN(len(miss))] = 'z'
		text := word(rng.IntN(50)) + string(miss) + word(rng.IntN(50))
		if rng.IntN(2) == 0 {
			text += strings.ToUpper(query) + query[:len(query)/2] + query + word(rng.IntN(20))
		}
		folded, _ := foldText(text)
		s, e, ok := q.findFolded(text, 0)
		want := strings.Index(folded, q.folded)
		if ok != (want >= 0) || ok && (s < 0 || e > len(text) || FoldString(text[s:e]) != q.folded) {
			t.Fatalf("query %q in %q: %d %d %v, strings.Index %d", query, text, s, e, ok, want)
		}
	}
}

// craftedCollision is a text and a query strings.Index compares in full
// at each place of the text: the text is "s" repeated, ending in U+017F
// (LATIN SMALL LETTER LONG S, which folds to "s", so that the query's
// byte search gives the text to the folding one), the query "s" repeated
// but its last 256 bytes, which follow the Thue-Morse sequence one below
// and one above "s" ("r", "t"). That makes the query's Rabin-Karp hash (a
// polynomial modulo 2^32 in an odd prime) equal to every window's of the
// text: their difference is a product of eight factors 1-x^(2^i), x odd,
// each even.
func craftedCollision(textBytes int) (text, query string) {
	var b strings.Builder
	for i := range 256 {
		if bits.OnesCount(uint(i))%2 == 0 {
			b.WriteByte('r')
		} else {
			b.WriteByte('t')
		}
	}
	query = strings.Repeat("s", 1023-256) + b.String()
	return strings.Repeat("s", textBytes) + "\u017f", query
}

// rabinKarpHash is strings.Index's hash of s (internal/bytealg.HashStr).
func rabinKarpHash(s string) uint32 {
	h := uint32(0)
	for i := 0; i < len(s); i++ {
		h = h*16777619 + uint32(s[i])
	}
	return h
}

func TestCraftedCollisionCollides(t *testing.T) {
	text, query := craftedCollision(3 << 10)
	if window := text[:len(query)]; window == query || rabinKarpHash(window) != rabinKarpHash(query) {
		t.Fatalf("the crafted query does not collide with the text's windows")
	}
	if q := NewQuery(query); q.ascii == nil {
		t.Fatalf("the crafted query is not searched for by bytes first")
	} else if _, ok := q.ascii.find(text); ok {
		t.Fatalf("the byte search does not give the crafted text to the folding one")
	}
	if _, _, ok := NewQuery(query).Find(text); ok {
		t.Fatalf("the crafted query is found in the text")
	}
}

// BenchmarkFindCrafted: Find of a 1 KiB query in a MiB of text crafted
// against strings.Index's hash (craftedCollision), beside a query of the
// same length that is simply absent.
func BenchmarkFindCrafted(b *testing.B) {
	text, crafted := craftedCollision(1 << 20)
	for name, query := range map[string]string{"crafted": crafted, "absent": strings.Repeat("x", 1023)} {
		b.Run(name, func(b *testing.B) {
			q := NewQuery(query)
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				q.Find(text)
			}
		})
	}
}
