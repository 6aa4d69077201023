package inspect

import (
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
