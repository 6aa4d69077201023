package sealedlog

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// line200 is a 200-byte log line, newline included.
var line200 = []byte(`{"role":"user","content":"` + strings.Repeat("x", 200-29) + `"}` + "\n")

func init() {
	if len(line200) != 200 {
		panic(len(line200))
	}
}

// BenchmarkAppend200: one durable 200-byte append per op, one writer (one
// journal batch and its fdatasync per append).
func BenchmarkAppend200(b *testing.B) {
	l, _, _ := mustCreate(b)
	b.SetBytes(int64(len(line200)))
	for b.Loop() {
		if _, err := l.Append(line200); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppend200Parallel: the same with many writers, where group
// commit in the journal shares the syncs.
func BenchmarkAppend200Parallel(b *testing.B) {
	l, _, _ := mustCreate(b)
	b.SetBytes(int64(len(line200)))
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := l.Append(line200); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/float64(l.j.Stats().Syncs), "appends/sync")
}

// rawFile is the baseline: a plain file on the same disk.
func rawFile(b *testing.B) *os.File {
	p, _ := paths(b)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return f
}

// BenchmarkRawWriteFdatasync: the same bytes with plain write+fdatasync.
func BenchmarkRawWriteFdatasync(b *testing.B) {
	f := rawFile(b)
	b.SetBytes(int64(len(line200)))
	for b.Loop() {
		if _, err := f.Write(line200); err != nil {
			b.Fatal(err)
		}
		if err := fdatasync(f); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkValidateAppendThroughput: large batches (4 MiB of 200-byte lines)
// validated, hashed and appended durably, against writing them raw.
func BenchmarkValidateAppendThroughput(b *testing.B) {
	batch := bytes.Repeat(line200, 4<<20/len(line200))
	b.Run("sealedlog", func(b *testing.B) {
		l, _, _ := mustCreate(b)
		b.SetBytes(int64(len(batch)))
		for b.Loop() {
			if _, err := l.Append(batch); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("validate-only", func(b *testing.B) {
		b.SetBytes(int64(len(batch)))
		for b.Loop() {
			if err := validate(batch); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw", func(b *testing.B) {
		f := rawFile(b)
		b.SetBytes(int64(len(batch)))
		for b.Loop() {
			if _, err := f.Write(batch); err != nil {
				b.Fatal(err)
			}
			if err := fdatasync(f); err != nil {
				b.Fatal(err)
			}
		}
	})
}
