package proto

import (
	"bytes"
	"math"
	"testing"
)

func TestClampTokens(t *testing.T) {
	for n, want := range map[int64]int64{-1: 0, math.MinInt64: 0, 0: 0, 42: 42, MaxTokens: MaxTokens, MaxTokens + 1: MaxTokens, math.MaxInt64: MaxTokens} {
		if got := ClampTokens(n); got != want {
			t.Errorf("ClampTokens(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestAddTokensSaturates(t *testing.T) {
	for _, c := range []struct{ a, b, want int64 }{
		{1, 2, 3},
		{math.MaxInt64, math.MaxInt64, math.MaxInt64},
		{math.MaxInt64 - 1, 2, math.MaxInt64},
		{math.MinInt64, -1, math.MinInt64},
		{math.MaxInt64, math.MinInt64, -1},
	} {
		if got := AddTokens(c.a, c.b); got != c.want {
			t.Errorf("AddTokens(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// TestClampUsage: a usage frame's integer counts are clamped, beyond
// int64 too; what is not an integer count, or not a usage frame, stays.
func TestClampUsage(t *testing.T) {
	f, err := ParseObject([]byte(`{"type":"usage","input_tokens":9223372036854775807,"output_tokens":-4,`+
		`"cached_input_tokens":123456789012345678901234567890,"reasoning_output_tokens":-99999999999999999999,`+
		`"model":"m","x_tokens":1.5,"other":9223372036854775807}`), true)
	if err != nil {
		t.Fatal(err)
	}
	ClampUsage(f)
	want := `{"type":"usage","input_tokens":9007199254740992,"output_tokens":0,"cached_input_tokens":9007199254740992,` +
		`"reasoning_output_tokens":0,"model":"m","x_tokens":1.5,"other":9223372036854775807}`
	if got := string(bytes.TrimSpace(f.Line())); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	g, _ := ParseObject([]byte(`{"type":"delta","input_tokens":9223372036854775807}`), true)
	ClampUsage(g)
	if got := string(g.Raw("input_tokens")); got != "9223372036854775807" {
		t.Errorf("a delta frame changed: %s", got)
	}
}
