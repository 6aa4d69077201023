package provider

import (
	"time"

	"github.com/ctxfs/ctxfs/agent/modelapi"
)

const (
	// AnthropicVersion is the anthropic-version header every request carries.
	AnthropicVersion = "2023-06-01"

	// MaxErrorBody is how much of an error response is read.
	MaxErrorBody = 64 << 10
	// MaxEventBytes bounds one SSE line, and the data of one event.
	MaxEventBytes = 4 << 20
	// MaxTextBytes bounds the whole reply text (EFBIG beyond).
	MaxTextBytes = 16 << 20
	// MaxReplyBytes bounds the bytes read of one reply's stream, whatever
	// its events carry (EFBIG beyond): without it a provider streaming
	// comments, pings or empty chunks without end, none of which counts
	// toward the text or tool-call bounds, would hold the run for ever.
	// A few times those bounds leave room for the wire format's overhead.
	MaxReplyBytes = 4 * (MaxTextBytes + MaxToolCallBytes)
)

// idleBound is c's silence bound in force.
func idleBound(c modelapi.Config) time.Duration {
	if c.IdleTimeout == 0 {
		return modelapi.DefaultIdleTimeout
	}
	return c.IdleTimeout
}
