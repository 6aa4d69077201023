package agent

import (
	"testing"

	"github.com/ctxfs/ctxfs/proto"
)

// TestProgramUsageClamped: a program's usage counts, however huge or
// negative, are taken within [0, proto.MaxTokens]: sums of them never wrap.
func TestProgramUsageClamped(t *testing.T) {
	f, why := programFrame([]byte(`{"type":"usage","model":"acme/x","input_tokens":9223372036854775807,"output_tokens":-2}`), testRunID)
	if f == nil {
		t.Fatalf("dropped: %s", why)
	}
	if in, out := string(f.Raw("input_tokens")), string(f.Raw("output_tokens")); in != "9007199254740992" || out != "0" {
		t.Errorf("counts %s and %s, want %d and 0", in, out, int64(proto.MaxTokens))
	}
}
