package proto

import (
	"math"
	"strconv"
	"strings"
)

// A usage frame counts one run's tokens, except one with "thread_total"
// true: a coding-agent CLI that reports its whole thread so far (Codex's
// turn.completed counts every run the thread resumed). Readers of one
// session's events turn those into each run's own counts with a
// ThreadUsage, so that sums over runs count every token once.
//
// A thread total below the one before is a new thread (the CLI session
// could not be resumed and another began): its counts are its own.

// ThreadUsage is the thread total seen last in one session's events.
type ThreadUsage struct{ in, out int64 }

// Own is a usage frame's own counts: in and out as recorded when the frame
// is a run's own, else the part of the thread total added since the last.
func (t *ThreadUsage) Own(in, out int64, threadTotal bool) (int64, int64) {
	if !threadTotal {
		return in, out
	}
	ownIn, ownOut := in, out
	if in >= t.in && out >= t.out {
		ownIn, ownOut = in-t.in, out-t.out
	}
	t.in, t.out = in, out
	return ownIn, ownOut
}

// MaxTokens is the most a usage count is taken as: 2^53, what a JSON
// number holds exactly. A count is clamped to [0, MaxTokens] where it is
// read from a provider, a CLI or a program (ClampTokens, ClampUsage), and
// counts are summed with AddTokens, so that no total wraps to a negative
// number whatever a hostile provider reports.
const MaxTokens = 1 << 53

// ClampTokens is n within [0, MaxTokens].
func ClampTokens(n int64) int64 { return min(max(n, 0), MaxTokens) }

// AddTokens is a+b, saturated at the bounds of int64 instead of wrapping.
func AddTokens(a, b int64) int64 {
	switch {
	case b > 0 && a > math.MaxInt64-b:
		return math.MaxInt64
	case b < 0 && a < math.MinInt64-b:
		return math.MinInt64
	}
	return a + b
}

// ClampUsage clamps the counts of a usage frame (its "…_tokens" members
// that are JSON integers) to [0, MaxTokens]; an integer beyond int64 is
// MaxTokens, or 0 when negative. Other members and other frames are left
// as they are: a count that is not an integer is not read as one.
func ClampUsage(f *Object) {
	if f.Str("type") != FrameUsage {
		return
	}
	for _, fl := range f.Fields {
		if !strings.HasSuffix(fl.Key, "_tokens") {
			continue
		}
		n, err := strconv.ParseInt(string(fl.Value), 10, 64)
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			err = nil // ParseInt's n is then the bound on the side of the number
		}
		if err != nil {
			continue
		}
		if c := ClampTokens(n); c != n {
			f.Set(fl.Key, c)
		}
	}
}
