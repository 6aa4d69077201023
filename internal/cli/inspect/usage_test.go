package inspect

import (
	"math"
	"testing"

	"github.com/ctxfs/ctxfs/proto"
)

// A Codex session's usage events count its thread so far: summed over
// runs, each token counts once (12+3, then 32+8 of which 20+5 are the
// second run's, then a run's own 7+1).
func TestUsageThreadTotals(t *testing.T) {
	u := &usageReport{}
	tab := usageTable{}
	var thread proto.ThreadUsage
	for _, line := range []string{
		`{"type":"usage","model":"gpt","input_tokens":12,"output_tokens":3,"thread_total":true}`,
		`{"type":"delta","text":"x"}`,
		`{"type":"usage","model":"gpt","input_tokens":32,"output_tokens":8,"thread_total":true}`,
		`{"type":"usage","model":"gpt","input_tokens":7,"output_tokens":1}`,
	} {
		if !u.event(tab, &thread, []byte(line)) {
			t.Fatalf("%s refused", line)
		}
	}
	_, all := tab.sorted()
	if all.InputTokens != 39 || all.OutputTokens != 9 || all.Events != 3 {
		t.Fatalf("totals %+v, want 39 in, 9 out, 3 events", all)
	}
}

// TestUsageTotalsSaturate: usage events a hostile provider (or program)
// made huge are taken as proto.MaxTokens, and the totals of many saturate
// instead of wrapping to a negative number.
func TestUsageTotalsSaturate(t *testing.T) {
	u := &usageReport{models: usageTable{}}
	tab := usageTable{}
	var thread proto.ThreadUsage
	line := []byte(`{"type":"usage","model":"m","input_tokens":9223372036854775807,"output_tokens":1}`)
	for range 2 {
		if !u.event(tab, &thread, line) {
			t.Fatalf("%s refused", line)
		}
	}
	if _, all := tab.sorted(); all.InputTokens != 2*proto.MaxTokens || all.OutputTokens != 2 {
		t.Fatalf("totals %+v, want %d input tokens", all, 2*proto.MaxTokens)
	}
	for range 2000 {
		u.event(tab, &thread, line)
	}
	u.addSession("s", tab)
	u.addSession("t", tab)
	if u.InputTokens != math.MaxInt64 || u.models[[2]string{"m", ""}].InputTokens != math.MaxInt64 {
		t.Fatalf("totals %d and %d, want them saturated", u.InputTokens, u.models[[2]string{"m", ""}].InputTokens)
	}
}
