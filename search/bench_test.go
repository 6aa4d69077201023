package search

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// benchLog is about 8 MiB of messages: words of Latin letters and common
// CJK ideographs, as a corpus of mixed conversations has.
func benchLog() string {
	rng := rand.New(rand.NewPCG(7, 8))
	var texts []string
	n := 0
	for n < 8<<20 {
		var b strings.Builder
		for range 20 + rng.IntN(200) {
			if rng.IntN(2) == 0 {
				for range 2 + rng.IntN(4) {
					b.WriteRune(rune(0x4E00 + int(rng.ExpFloat64()*300)%3000))
				}
			} else {
				for range 2 + rng.IntN(8) {
					b.WriteByte(byte('a' + int(rng.ExpFloat64()*4)%26))
				}
			}
			b.WriteByte(' ')
		}
		texts = append(texts, b.String())
		n += b.Len()
	}
	return messageLog(texts)
}

// BenchmarkIndex: building the index of a log from scratch (parse, fold,
// hash, segments); MB/s of messages.jsonl.
func BenchmarkIndex(b *testing.B) {
	log := benchLog()
	b.SetBytes(int64(len(log)))
	for b.Loop() {
		Extend(strings.NewReader(log), NewSegment([16]byte{}, 0), int64(len(log)), func(*Segment) error { return nil })
	}
}

// BenchmarkVerify: the scan that verifies a candidate range (parse, fold,
// match); MB/s.
func BenchmarkVerify(b *testing.B) {
	log := benchLog()
	q := NewQuery("量子纠缠")
	b.SetBytes(int64(len(log)))
	for b.Loop() {
		EachLine(strings.NewReader(log), 0, int64(len(log)), func(line []byte, _ int64) error {
			if m, ok := ParseMessage(line); ok {
				q.Find(m.Text)
			}
			return nil
		})
	}
}
