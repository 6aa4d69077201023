package agent

import (
	"testing"

	"github.com/ctxfs/ctxfs/agent/modelapi"
)

// TestSummarizeRequestIsTheRuns: a compaction's request goes as its run's
// uid (over that uid's connections: a kept one would otherwise tell a
// user that someone compacted lately) and of no conversation, so that
// nothing of it is kept for a later body.
func TestSummarizeRequestIsTheRuns(t *testing.T) {
	req := summarizeRequest(Spec{Uid: 1234}, "the transcript")
	if req.Owner != (modelapi.Owner{Uid: 1234}) {
		t.Fatalf("a compaction's request goes as %+v, want uid 1234 and no conversation", req.Owner)
	}
	if len(req.Turns) != 1 || req.Turns[0].Text != "the transcript" || req.System != summarizeInstruction {
		t.Fatalf("a compaction's request is %+v", req)
	}
}
