package proto

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
