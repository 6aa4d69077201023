package proto

// The op and frame of SPEC 18's context window.
const (
	// OpCompact runs a session's compaction strategy now: session, scope.
	OpCompact = "compact"
	// FrameCompacted answers OpCompact: cursor (the id of the last
	// message the summary covers), summary_bytes, kept_turns, strategy,
	// and error when the strategy failed (the old summary kept).
	FrameCompacted = "compacted"
)
