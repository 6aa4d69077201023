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

// BenchmarkScanCandidate: the scan of a candidate range as a query makes
// it (the raw-line test, then decoding and matching what passes) over
// lines as the engine records them (run ids, time stamps), for a rare
// Latin query, a common one and a CJK one; MB/s.
func BenchmarkScanCandidate(b *testing.B) {
	log := recordedLog(benchLog())
	for _, query := range []string{"zebrafish", "system", "量子纠缠"} {
		b.Run(query, func(b *testing.B) {
			q := NewQuery(query)
			b.SetBytes(int64(len(log)))
			for b.Loop() {
				EachLineMay(strings.NewReader(log), 0, int64(len(log)), q.MayHoldIn, func(line []byte, _ int64) error {
					if q.MayHold(line) {
						if m, ok := ParseMessage(line); ok {
							q.Find(m.Text)
						}
					}
					return nil
				})
			}
		})
	}
}

// recordedLog gives each line of a messageLog the run id and time stamp
// the engine records, and a few English words, as real logs have.
func recordedLog(log string) string {
	var b strings.Builder
	for i, line := range strings.Split(strings.TrimSuffix(log, "\n"), "\n") {
		line = strings.Replace(line, `"ts":"T"`, `"ts":"2026-01-01T00:00:00.000Z"`, 1)
		line = strings.Replace(line, `"run":"r`, `"run":"ctx-0123456789abcdef0123456789abcde`, 1)
		if i%4 == 0 {
			line = strings.Replace(line, `"content":"`, `"content":"The system file for the agent is here. `, 1)
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}
